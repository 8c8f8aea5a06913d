package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// GGUF weight layouts create-demo can write: one type for every matrix,
// or a llama.cpp mix (q5_k_m, q4_k_m, q3_k_m, q2_k), whose type here is
// that of the matrices no rule singles out; see mixType.
var ggufTypes = map[string]tensor.DType{
	"f32": tensor.F32, "f16": tensor.F16, "bf16": tensor.BF16,
	"q8_0": tensor.Q8_0, "q4_0": tensor.Q4_0, "q4_k": tensor.Q4_K, "q6_k": tensor.Q6_K,
	"q5_k": tensor.Q5_K, "q3_k": tensor.Q3_K,
	"q5_k_m": tensor.Q5_K, "q4_k_m": tensor.Q4_K, "q3_k_m": tensor.Q3_K, "q2_k": tensor.Q2_K,
}

// mixType is the type a llama.cpp mix gives the output projection,
// attn_v, ffn_down (and ffn_down_exps) and attn_output, following
// llama.cpp's recipe in spirit: its choice for the layers it upgrades,
// applied to every layer (a demo has few layers, and a test of the mix
// wants every type in every layer). Unset: the mix's own type.
var mixType = map[string]struct{ output, attnV, ffnDown, attnOut tensor.DType }{
	"q5_k_m": {tensor.Q6_K, tensor.Q6_K, tensor.Q6_K, tensor.Invalid},
	"q4_k_m": {tensor.Q6_K, tensor.Q6_K, tensor.Q6_K, tensor.Invalid},
	"q3_k_m": {tensor.Q6_K, tensor.Q5_K, tensor.Q4_K, tensor.Q4_K},
	"q2_k":   {tensor.Q6_K, tensor.Q3_K, tensor.Q3_K, tensor.Q3_K},
}

// GGUFLayout names the GGUF weight layout the options write.
func (o Options) GGUFLayout() (string, error) { return o.ggufType() }

// ggufType names the GGUF layout for the options: --gguf-type if given,
// else --quantize 8 → q8_0, 4 → q4_k_m, 0 → the float dtype.
func (o Options) ggufType() (string, error) {
	t := strings.ToLower(o.GGUFType)
	if t == "" {
		switch o.Quantize {
		case 0:
			t = o.DType
		case 8:
			t = "q8_0"
		case 4:
			t = "q4_k_m"
		default:
			return "", fmt.Errorf("demo: --quantize %d has no GGUF equivalent (use --gguf-type)", o.Quantize)
		}
	}
	if _, ok := ggufTypes[t]; !ok {
		return "", fmt.Errorf("demo: unknown --gguf-type %q (want f32, f16, bf16, q8_0, q4_0, q3_k, q4_k, q5_k, q6_k, q2_k, q3_k_m, q4_k_m or q5_k_m)", o.GGUFType)
	}
	return t, nil
}

// GGUFPath is the file a GGUF demo is written to: out itself when it ends
// in ".gguf", else out + ".gguf" (a GGUF model is named after its file).
func GGUFPath(out string) string {
	if strings.HasSuffix(out, ".gguf") {
		return out
	}
	return strings.TrimSuffix(out, string(filepath.Separator)) + ".gguf"
}

// writeGGUF writes m as one GGUF file at path: llama.cpp's metadata keys and
// tensor names, the tokenizer and chat template as metadata, and Q/K rows
// permuted for the llama architecture as llama.cpp's converter does.
func writeGGUF(path string, m *Model) error {
	kind, err := m.Options.ggufType()
	if err != nil {
		return err
	}
	p := m.Params
	cfg := gguf.ModelConfig{
		ModelType: p.Arch, HiddenSize: p.Hidden, NumHiddenLayers: p.Layers,
		NumAttentionHeads: p.Heads, NumKeyValueHeads: p.KVHeads, HeadDim: p.HeadDim,
		IntermediateSize: p.Intermediate, RMSNormEps: p.RMSNormEps, RopeTheta: p.RopeTheta,
		MaxPositionEmbeddings: p.MaxPositions, VocabSize: p.Vocab,
	}
	if p.Arch == modelfile.ArchQwen3MoE {
		// qwen3moe: llama.cpp's converter writes no expert_weights_norm
		// (its graph always renormalizes, as the demo's norm_topk_prob).
		cfg.Experts, cfg.ExpertsUsed, cfg.ExpertIntermediate = p.Experts, p.ExpertsPerTok, p.MoEIntermediate
	}
	if p.Arch == modelfile.ArchGptOss {
		if err := gptOssGGUFConfig(p, &cfg); err != nil {
			return err
		}
	}
	meta := append(cfg.KVs(),
		gguf.KV{Key: gguf.KeyName, Value: gguf.String("fusion-demo-" + p.Arch)},
		gguf.KV{Key: "general.file_type", Value: gguf.Uint32(ggufFileType(kind))},
	)
	tok := m.Tokenizer
	tkv, err := gguf.TokenizerKVs(gguf.HFTokenizer{
		JSON: tok.Files["tokenizer.json"], Pre: tok.Pre, BOS: tok.BOS, EOS: tok.EOS,
		AddBOS: tok.Pre == "llama-bpe", ChatTemplate: tok.ChatTemplate, VocabSize: p.Vocab,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	meta = append(meta, tkv...)

	tensors := make([]gguf.WriteTensor, 0, len(m.Tensors))
	// A repeated layer (Options.DistinctLayers) shares its values with an
	// earlier one: they are quantized once and the bytes shared.
	type key struct {
		data  *float32
		n     int
		dtype tensor.DType
		shape string
	}
	done := map[key]gguf.WriteTensor{}
	for _, t := range m.Tensors {
		name, ok := gguf.GGUFNameFor(p.Arch, t.Name)
		if !ok {
			return fmt.Errorf("demo: no GGUF name for tensor %q", t.Name)
		}
		k := key{unsafe.SliceData(t.Data), len(t.Data), tensorType(kind, name, t.Shape), fmt.Sprint(t.Shape)}
		if wt, seen := done[k]; seen && k.n > 0 && p.Arch != modelfile.ArchGptOss {
			wt.Name = name
			tensors = append(tensors, wt)
			continue
		}
		data := t.Data
		if heads := qkHeads(p, t.Name); heads > 0 && gguf.NeedsQKPermute(p.Arch) {
			if data, err = gguf.PermuteQKFloats(t.Name, t.Shape, t.Data, heads); err != nil {
				return fmt.Errorf("demo: %s: %w", t.Name, err)
			}
		}
		var wt gguf.WriteTensor
		if p.Arch == modelfile.ArchGptOss {
			wt, err = gptOssGGUFTensor(kind, name, t.Shape, data, m.DType)
		} else {
			wt, err = gguf.QuantizeTensor(name, tensorType(kind, name, t.Shape), t.Shape, data)
		}
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		done[k] = wt
		tensors = append(tensors, wt)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if err := gguf.WriteFile(path, meta, tensors); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// tensorType picks the storage type of one tensor: vectors (norms) and a
// mixture's router (ffn_gate_inp) stay F32, as llama.cpp's converter and
// llama-quantize keep them; matrices and stacked experts take the chosen
// type (a mix: mixType's, ffn_down_exps as ffn_down), falling back to
// Q8_0 and then F16 when a row is not a whole number of blocks.
func tensorType(kind, name string, shape []int64) tensor.DType {
	if len(shape) < 2 || strings.HasSuffix(name, ".ffn_gate_inp.weight") {
		return tensor.F32
	}
	want := ggufTypes[kind]
	if mix, ok := mixType[kind]; ok {
		var dt tensor.DType
		switch {
		case name == "output.weight":
			dt = mix.output
		case strings.HasSuffix(name, ".attn_v.weight"):
			dt = mix.attnV
		case strings.HasSuffix(name, ".ffn_down.weight") || strings.HasSuffix(name, ".ffn_down_exps.weight"):
			dt = mix.ffnDown
		case strings.HasSuffix(name, ".attn_output.weight"):
			dt = mix.attnOut
		}
		if dt != tensor.Invalid {
			want = dt
		}
	}
	row := shape[len(shape)-1]
	for _, dt := range []tensor.DType{want, tensor.Q8_0, tensor.F16} {
		if row%int64(dt.BlockElems()) == 0 {
			return dt
		}
	}
	return tensor.F16
}

// qkHeads returns the head count to permute a q_proj/k_proj weight by, or
// 0 for other tensors.
func qkHeads(p Params, hfName string) int { return gguf.QKHeads(hfName, p.Heads, p.KVHeads) }

// ggufFileType is general.file_type as llama.cpp numbers it (LLAMA_FTYPE_*).
func ggufFileType(kind string) uint32 {
	return map[string]uint32{
		"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q2_k": 10, "q3_k": 11, "q3_k_m": 12, "q4_k": 14, "q4_k_m": 15,
		"q5_k": 16, "q5_k_m": 17, "q6_k": 18, "bf16": 32,
	}[kind]
}
