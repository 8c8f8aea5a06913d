package demo

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// Create builds the model opts describe and writes it into dir.
func Create(dir string, opts Options) (*Model, error) {
	m, err := Build(opts)
	if err != nil {
		return nil, err
	}
	return m, Write(dir, m)
}

// Write writes m into dir (created if needed) in m.Options.Format,
// replacing the files it writes and leaving others alone.
func Write(dir string, m *Model) error {
	if m.Options.Format == FormatGGUF {
		return writeGGUF(GGUFPath(dir), m)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	ts, err := m.SafetensorsTensors()
	if err != nil {
		return err
	}
	format := "pt"
	if m.Options.Quantize != 0 {
		format = "mlx"
	}
	if err := safetensors.WriteFile(filepath.Join(dir, modelfile.SingleWeightsFile), ts, map[string]string{"format": format}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	files := map[string][]byte{}
	for name, v := range map[string]any{modelfile.ConfigFile: m.Config, modelfile.GenerationConfigFile: m.Generation} {
		if files[name], err = marshal(v, true); err != nil {
			return fmt.Errorf("demo: %s: %w", name, err)
		}
	}
	for name, b := range m.Tokenizer.Files {
		files[name] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), files[n], 0o644); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}

// SafetensorsTensors returns the tensors of model.safetensors: each weight
// in the model dtype, or, when quantizing, each linear and embedding whose
// input size is a multiple of the group size as an MLX affine triple
// (weight U32, scales and biases in the model dtype), exactly as
// mlx.core.quantize makes it (stacked experts [E, out, in] quantized along
// their last axis, as a matrix of E·out rows); in the order the Python
// library writes.
func (m *Model) SafetensorsTensors() ([]tensor.Tensor, error) {
	// A repeated layer (Options.DistinctLayers) shares its values with an
	// earlier one: they are encoded once and the bytes shared.
	type key struct {
		data        *float32
		n           int
		group, bits int
		mode        string
		quantized   bool
		shape       string
	}
	done := map[key][]tensor.Tensor{}
	var out []tensor.Tensor
	for _, t := range m.Tensors {
		group, bits, mode, ok := m.quantParams(t)
		t.Name = m.Params.fileName(t.Name)
		k := key{unsafe.SliceData(t.Data), len(t.Data), group, bits, mode, ok, fmt.Sprint(t.Shape)}
		if prev, seen := done[k]; seen && k.n > 0 {
			out = append(out, renamed(prev, t.Name)...)
			continue
		}
		ts, err := m.encodeTensor(t, group, bits, mode, ok)
		if err != nil {
			return nil, err
		}
		done[k] = ts
		out = append(out, ts...)
	}
	safetensors.SortLikePython(out)
	return out, nil
}

// renamed returns the tensors one weight was stored as (the weight first,
// then its scales and biases) under the paths of weight name.
func renamed(ts []tensor.Tensor, name string) []tensor.Tensor {
	from, to := strings.TrimSuffix(ts[0].Name, ".weight"), strings.TrimSuffix(name, ".weight")
	out := slices.Clone(ts)
	for i := range out {
		out[i].Name = to + strings.TrimPrefix(out[i].Name, from)
	}
	return out
}

// encodeTensor stores one weight: in the model dtype, or (quantized) as
// its MLX triple or FP pair.
func (m *Model) encodeTensor(t Tensor, group, bits int, mode string, quantized bool) ([]tensor.Tensor, error) {
	if !quantized {
		return []tensor.Tensor{{Name: t.Name, DType: m.DType, Shape: t.Shape, Data: m.encode(t.Data)}}, nil
	}
	lead := t.Shape[:len(t.Shape)-1] // [out] or [experts, out]
	cols := int(t.Shape[len(t.Shape)-1])
	rows := len(t.Data) / cols
	path := strings.TrimSuffix(t.Name, ".weight")
	shape := func(last int) []int64 { return append(slices.Clone(lead), int64(last)) }
	if mode != modelfile.ModeAffine {
		codes, scales, err := modelfile.QuantizeFP(mode, m.DType, t.Data, rows, cols)
		if err != nil {
			return nil, fmt.Errorf("demo: %s: %w", t.Name, err)
		}
		return []tensor.Tensor{
			{Name: t.Name, DType: tensor.U32, Shape: shape(modelfile.PackedCols(cols, bits)), Data: codes},
			{Name: path + ".scales", DType: tensor.U8, Shape: shape(cols / group), Data: scales},
		}, nil
	}
	packed, scales, biases, err := modelfile.QuantizeAffine(t.Data, rows, cols, group, bits)
	if err != nil {
		return nil, fmt.Errorf("demo: %s: %w", t.Name, err)
	}
	words := make([]byte, 4*len(packed))
	for i, w := range packed {
		binary.LittleEndian.PutUint32(words[4*i:], w)
	}
	return []tensor.Tensor{
		{Name: t.Name, DType: tensor.U32, Shape: shape(modelfile.PackedCols(cols, bits)), Data: words},
		{Name: path + ".scales", DType: m.DType, Shape: shape(cols / group), Data: m.encode(scales)},
		{Name: path + ".biases", DType: m.DType, Shape: shape(cols / group), Data: m.encode(biases)},
	}, nil
}

// routerGroup and routerBits are how mlx-lm quantizes Qwen3-MoE's and
// gpt-oss's routers (mlp.gate, mlp.router), whatever the rest of the model
// gets.
const routerGroup, routerBits = 64, 8

// quantParams says whether t is quantized and how: linear layers,
// embeddings and stacked experts whose input size is a multiple of the
// group size, the rule mlx-lm quantizes by; a MoE router at 8 bits in
// groups of 64, affine (mlx-lm's quant_predicate for qwen3_moe). Norms
// stay float.
func (m *Model) quantParams(t Tensor) (group, bits int, mode string, ok bool) {
	o := m.Options
	if o.Quantize == 0 {
		return 0, 0, "", false
	}
	if (m.Params.Arch == modelfile.ArchDeepseekV3 || m.Params.Arch == modelfile.ArchGlm4MoE) && strings.HasSuffix(t.Name, ".mlp.gate.weight") {
		return 0, 0, "", false // MoEGate is not a layer mlx-lm quantizes
	}
	router := strings.HasSuffix(t.Name, ".mlp.gate.weight") || strings.HasSuffix(t.Name, ".mlp.router.weight") ||
		strings.HasSuffix(t.Name, ".mlp.shared_expert_gate.weight") || // qwen3_next's quant_predicate: 8 bits too
		strings.HasSuffix(t.Name, ".router.proj.weight") // gemma4_text's
	// MLA's kv_a_proj_with_mqa is a Linear, embed_q and unembed_out
	// stacked MultiLinears (quantized like stacked experts).
	mla := strings.HasSuffix(t.Name, "_mqa.weight") || strings.HasSuffix(t.Name, ".embed_q.weight") || strings.HasSuffix(t.Name, ".unembed_out.weight")
	// The Gated DeltaNet's input projections are Linears too: Qwen3-Next's
	// in_proj_qkvz and in_proj_ba, Qwen3.5's in_proj_qkv, in_proj_z,
	// in_proj_b and in_proj_a (mlx_lm.convert quantizes even the last two,
	// a row per value head).
	deltaNet := strings.Contains(t.Name, ".linear_attn.in_proj_") && strings.HasSuffix(t.Name, ".weight")
	// Gemma 4's per-layer inputs: an Embedding and two Linears.
	perLayer := t.Name == "model.embed_tokens_per_layer.weight" || t.Name == "model.per_layer_model_projection.weight" ||
		strings.HasSuffix(t.Name, ".per_layer_input_gate.weight") || strings.HasSuffix(t.Name, ".per_layer_projection.weight")
	linear := perLayer || deltaNet || strings.HasSuffix(t.Name, "_proj.weight") || t.Name == "model.embed_tokens.weight" || t.Name == "lm_head.weight" || router || mla
	if !linear || len(t.Shape) < 2 || t.Shape[len(t.Shape)-1]%int64(o.GroupSize) != 0 {
		return 0, 0, "", false
	}
	if router {
		return routerGroup, routerBits, modelfile.ModeAffine, true
	}
	return o.GroupSize, o.Quantize, o.QuantMode, true
}

// quantOverrides are the per-module entries of config.json's
// quantization block: the routers' parameters, as the families'
// quant_predicate gives them to mlx_lm.convert (group size and bits, no
// mode: affine).
func (m *Model) quantOverrides() map[string]any {
	o := m.Options
	out := map[string]any{}
	for _, t := range m.Tensors {
		if g, b, mode, ok := m.quantParams(t); ok && (g != o.GroupSize || b != o.Quantize || mode != o.QuantMode) {
			out[strings.TrimSuffix(m.Params.fileName(t.Name), ".weight")] = map[string]any{"group_size": g, "bits": b}
		}
	}
	return out
}
