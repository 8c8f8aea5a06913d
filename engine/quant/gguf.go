package quant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// Output formats.
const (
	FormatMLX  = "mlx"  // an MLX affine model directory (the default)
	FormatGGUF = "gguf" // one GGUF v3 file
)

// GGUF types, named as llama-quantize names them.
const (
	GGUFQ8_0   = "Q8_0"
	GGUFQ4_K_M = "Q4_K_M"
	GGUFQ6_K   = "Q6_K"
	GGUFQ5_K_M = "Q5_K_M"
	GGUFQ3_K_M = "Q3_K_M"
	GGUFQ2_K   = "Q2_K"
)

// GGUFTypes lists the GGUF types oQ writes.
var GGUFTypes = []string{GGUFQ8_0, GGUFQ4_K_M, GGUFQ6_K, GGUFQ5_K_M, GGUFQ3_K_M, GGUFQ2_K}

// ggufFileType is general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*).
var ggufFileType = map[string]uint32{GGUFQ8_0: 7, GGUFQ4_K_M: 15, GGUFQ6_K: 18, GGUFQ5_K_M: 17, GGUFQ3_K_M: 12, GGUFQ2_K: 10}

// ggufDefaultType is the type of a matrix no rule singles out
// (llama_ftype_get_default_type).
var ggufDefaultType = map[string]tensor.DType{GGUFQ8_0: tensor.Q8_0, GGUFQ4_K_M: tensor.Q4_K, GGUFQ6_K: tensor.Q6_K,
	GGUFQ5_K_M: tensor.Q5_K, GGUFQ3_K_M: tensor.Q3_K, GGUFQ2_K: tensor.Q2_K}

// ggufArch maps a source architecture to llama.cpp's: its converter
// writes Mistral as llama.
var ggufArch = map[string]string{
	modelfile.ArchLlama: "llama", modelfile.ArchMistral: "llama",
	modelfile.ArchQwen2: "qwen2", modelfile.ArchQwen3: "qwen3",
	modelfile.ArchQwen3MoE: "qwen3moe",
}

// ggufArchitectures are the sources a GGUF export opens: MLX's, and
// Qwen3-MoE with its experts stacked as mlx-lm stores them
// (mlp.switch_mlp.*, which are llama.cpp's ffn_*_exps).
var ggufArchitectures = append(slices.Clone(architectures), modelfile.ArchQwen3MoE)

// GGUFPath is the file a GGUF output is written to: dst itself when it
// ends in ".gguf", else dst + ".gguf" (a GGUF model is named after its
// file).
func GGUFPath(dst string) string {
	if strings.HasSuffix(dst, ".gguf") {
		return dst
	}
	return strings.TrimSuffix(dst, string(filepath.Separator)) + ".gguf"
}

// useMoreBits is llama.cpp's choice of the layers a K-quant mix gives
// more bits: the first and last eighth, and every third one between.
func useMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// GGUFModel is what llama.cpp's per-tensor type rules read of a model
// besides the tensor's own name and shape.
type GGUFModel struct {
	Layers  int  // num_hidden_layers
	Tied    bool // tied embeddings: token_embd serves as the output
	GQA     int  // attention heads per key/value head (llama.cpp's n_gqa)
	Experts int  // routed experts, 0 for a dense model
}

// ggufModel is the GGUFModel of a source config.
func ggufModel(c *modelfile.Config) GGUFModel {
	m := GGUFModel{Layers: c.NumHiddenLayers, Tied: c.TieWordEmbeddings}
	if c.NumKeyValueHeads > 0 {
		m.GQA = c.NumAttentionHeads / c.NumKeyValueHeads
	}
	if c.MoE != nil {
		m.Experts = c.MoE.Experts
	}
	return m
}

// GGUFTensorType is the storage type of one tensor (GGUF name, shape
// outermost first) in a GGUF of type typ, following llama.cpp's
// llama_tensor_get_type (no importance matrix, not Falcon, not a "70B"
// model) for the families oQ exports:
//   - vectors (norms, biases) and a mixture's router (ffn_gate_inp, which
//     llama-quantize never quantizes) stay F32;
//   - the output projection (or, with tied embeddings, token_embd, which
//     serves as it) is Q6_K unless the type is Q8_0;
//   - attn_v: Q2_K gives it Q4_K when GQA ≥ 4, else Q3_K; Q3_K_M gives
//     layers 0 and 1 Q5_K and the rest Q4_K; Q4_K_M and Q5_K_M give Q6_K
//     to the layers useMoreBits picks; with exactly 8 experts every type
//     stores it (and attn_k) in Q8_0;
//   - ffn_down (stacked experts' ffn_down_exps too, by the layer in their
//     name): Q2_K gives Q3_K; Q3_K_M gives the first sixteenth of the
//     layers Q5_K and the rest Q4_K; Q4_K_M and Q5_K_M give Q6_K to the
//     layers useMoreBits picks;
//   - attn_output: Q2_K gives Q3_K and Q3_K_M Q4_K; with exactly 8
//     experts, Q2_K, Q3_K_M and Q4_K_M give Q5_K;
//   - every other matrix takes the type's default (ggufDefaultType);
//   - a row that is not whole blocks of the chosen type falls back as
//     llama.cpp does where the backends run the fallback (Q2_K and Q3_K
//     to Q4_0), else to Q8_0 (llama.cpp: Q6_K → Q8_0 too, but Q4_K →
//     Q5_0 and Q5_K → Q5_1, types fusion's backends do not run; Q8_0
//     keeps at least their precision), then F16.
func GGUFTensorType(typ, name string, shape []int64, m GGUFModel) tensor.DType {
	if len(shape) < 2 || strings.HasSuffix(name, ".ffn_gate_inp.weight") {
		return tensor.F32
	}
	want := ggufDefaultType[typ]
	row := shape[len(shape)-1]
	layer := -1
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if n, err := strconv.Atoi(rest[:max(0, strings.IndexByte(rest, '.'))]); err == nil {
			layer = n
		}
	}
	more := useMoreBits(layer, m.Layers)
	switch {
	case name == "output.weight" || m.Tied && name == "token_embd.weight":
		if row%int64(want.BlockElems()) != 0 {
			want = tensor.Q8_0
		} else if want != tensor.Q8_0 {
			want = tensor.Q6_K
		}
	case layer < 0:
	case strings.HasSuffix(name, ".attn_v.weight"):
		switch {
		case typ == GGUFQ2_K && m.GQA >= 4:
			want = tensor.Q4_K
		case typ == GGUFQ2_K:
			want = tensor.Q3_K
		case typ == GGUFQ3_K_M && layer < 2:
			want = tensor.Q5_K
		case typ == GGUFQ3_K_M:
			want = tensor.Q4_K
		case (typ == GGUFQ4_K_M || typ == GGUFQ5_K_M) && more:
			want = tensor.Q6_K
		}
		if m.Experts == 8 {
			want = tensor.Q8_0
		}
	case strings.HasSuffix(name, ".attn_k.weight"):
		if m.Experts == 8 {
			want = tensor.Q8_0
		}
	case strings.Contains(name, ".ffn_down"):
		switch {
		case typ == GGUFQ2_K:
			want = tensor.Q3_K
		case typ == GGUFQ3_K_M && layer < m.Layers/16:
			want = tensor.Q5_K
		case typ == GGUFQ3_K_M:
			want = tensor.Q4_K
		case (typ == GGUFQ4_K_M || typ == GGUFQ5_K_M) && more:
			want = tensor.Q6_K
		}
	case strings.HasSuffix(name, ".attn_output.weight"):
		switch {
		case m.Experts == 8 && (typ == GGUFQ2_K || typ == GGUFQ3_K_M || typ == GGUFQ4_K_M):
			want = tensor.Q5_K
		case m.Experts == 8:
		case typ == GGUFQ2_K:
			want = tensor.Q3_K
		case typ == GGUFQ3_K_M:
			want = tensor.Q4_K
		}
	}
	if row%int64(want.BlockElems()) != 0 {
		if want == tensor.Q2_K || want == tensor.Q3_K {
			want = tensor.Q4_0
		} else {
			want = tensor.Q8_0
		}
	}
	if row%int64(want.BlockElems()) != 0 {
		want = tensor.F16
	}
	return want
}

// quantizeGGUF writes the source model as one GGUF file of type o.GGUFType:
// llama.cpp's tensor names and metadata, the tokenizer and chat template as
// tokenizer.* keys, Q/K rows permuted for the llama architecture, each
// matrix quantized by ggml's reference quantizer.
func quantizeGGUF(ctx context.Context, src, dst string, o Options) (Result, error) {
	path := GGUFPath(dst)
	if _, err := os.Stat(path); err == nil {
		return Result{}, fmt.Errorf("%w: %s", ErrExists, path)
	}
	s, err := openSource(src, DefaultGroupSize, ggufArchitectures)
	if err != nil {
		return Result{}, err
	}
	defer s.w.Close()
	c := s.cfg
	arch, err := ggufSupported(c)
	if err != nil {
		return Result{}, err
	}
	var ropeFreqs []float32
	if c.RopeScaling != nil {
		ropeFreqs = llama3RopeFactors(c)
	}
	meta, err := ggufMeta(src, arch, o.GGUFType, c)
	if err != nil {
		return Result{}, err
	}
	names := slices.Clone(s.names)
	gnames := map[string]string{}
	for _, n := range names {
		g, ok := gguf.GGUFName(n)
		if !ok {
			return Result{}, fmt.Errorf("%w: tensor %s has no GGUF name", ErrUnsupported, n)
		}
		gnames[n] = g
	}
	slices.SortStableFunc(names, func(a, b string) int { return compareGGUF(gnames[a], gnames[b]) })

	res := Result{Dir: path, Format: FormatGGUF, Type: o.GGUFType, TensorTypes: map[string]int{}}
	gm := ggufModel(c)
	total := len(names)
	if ropeFreqs != nil {
		total++
	}
	var out []gguf.WriteTensor
	var bits, weights float64
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return Result{}, context.Cause(ctx)
		}
		t, _ := s.w.Tensor(name)
		v, err := tensor.Floats(t)
		if err != nil {
			return Result{}, fmt.Errorf("quant: %s: %w", name, err)
		}
		g := gnames[name]
		if heads := gguf.QKHeads(name, c.NumAttentionHeads, c.NumKeyValueHeads); heads > 0 && gguf.NeedsQKPermute(arch) {
			if v, err = gguf.PermuteQKFloats(name, t.Shape, v, heads); err != nil {
				return Result{}, fmt.Errorf("quant: %s: %w", name, err)
			}
		}
		dt := GGUFTensorType(o.GGUFType, g, t.Shape, gm)
		wt, err := quantizeRows(g, dt, t.Shape, v)
		if err != nil {
			return Result{}, fmt.Errorf("quant: %w", err)
		}
		out = append(out, wt)
		res.TensorTypes[dt.String()]++
		if len(t.Shape) >= 2 {
			res.Quantized++
			bits += 8 * float64(len(wt.Data))
			weights += float64(len(v))
		}
		if o.Progress != nil {
			o.Progress(len(out), total)
		}
	}
	if ropeFreqs != nil {
		wt, err := gguf.QuantizeTensor("rope_freqs.weight", tensor.F32, []int64{int64(len(ropeFreqs))}, ropeFreqs)
		if err != nil {
			return Result{}, fmt.Errorf("quant: %w", err)
		}
		out = append(out, wt)
		res.TensorTypes[tensor.F32.String()]++
		if o.Progress != nil {
			o.Progress(len(out), total)
		}
	}
	res.Tensors = len(out)
	if weights > 0 {
		res.BitsPerWeight = bits / weights
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return Result{}, fmt.Errorf("quant: %w", err)
	}
	if err := gguf.WriteFile(path, meta, out); err != nil {
		return Result{}, fmt.Errorf("quant: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return Result{}, fmt.Errorf("quant: %w", err)
	}
	res.Bytes = st.Size()
	if o.Log != nil {
		o.Log(fmt.Sprintf("wrote %s: %d tensors (%v), %.3f bits per weight", path, res.Tensors, res.TensorTypes, res.BitsPerWeight))
	}
	return res, nil
}

// quantizeRows is gguf.QuantizeTensor with the rows split over the CPUs
// (each row is whole blocks, so the parts concatenate to the same bytes).
func quantizeRows(name string, dt tensor.DType, shape []int64, v []float32) (gguf.WriteTensor, error) {
	workers := runtime.GOMAXPROCS(0)
	if len(shape) < 2 || workers < 2 || len(v) < 1<<16 {
		return gguf.QuantizeTensor(name, dt, shape, v)
	}
	cols := int(shape[len(shape)-1])
	rows := len(v) / cols
	per := (rows + workers - 1) / workers
	n := (rows + per - 1) / per
	parts, errs := make([][]byte, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		lo, hi := i*per, min((i+1)*per, rows)
		wg.Add(1)
		go func() {
			defer wg.Done()
			wt, err := gguf.QuantizeTensor(name, dt, []int64{int64(hi - lo), int64(cols)}, v[lo*cols:hi*cols])
			parts[i], errs[i] = wt.Data, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return gguf.WriteTensor{}, err
	}
	return gguf.WriteTensor{Name: name, DType: dt, Shape: slices.Clone(shape), Data: slices.Concat(parts...)}, nil
}

// llama3RopeFactors is the rope_freqs.weight llama.cpp's converter writes
// for Llama 3 scaling: per rotated frequency, the factor its period is
// stretched by (1 above old/high_freq_factor, factor beyond
// old/low_freq_factor wavelength, a smooth blend between).
func llama3RopeFactors(c *modelfile.Config) []float32 {
	s := c.RopeScaling
	dims := c.HeadDim
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWavelen, highWavelen := old/s.LowFreqFactor, old/s.HighFreqFactor
	out := make([]float32, dims/2)
	for i := range out {
		freq := 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(dims))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(s.Factor)
		default:
			smooth := (old/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/s.Factor + smooth))
		}
	}
	return out
}

// ggufSupported returns llama.cpp's architecture for a source config, or
// ErrUnsupported when oQ cannot export it to GGUF.
func ggufSupported(c *modelfile.Config) (string, error) {
	arch, ok := ggufArch[c.Architecture]
	if !ok {
		return "", fmt.Errorf("%w: architecture %q has no GGUF export here (llama, mistral, qwen2, qwen3, qwen3_moe)", ErrUnsupported, c.Architecture)
	}
	if s := c.RopeScaling; s != nil && (s.Type != modelfile.RopeLlama3 || arch != "llama") {
		return "", fmt.Errorf("%w: rope scaling %q in a GGUF export", ErrUnsupported, s.Type)
	}
	if m := c.MoE; m != nil && (m.SparseStep != 1 || len(m.MLPOnlyLayers) > 0 || !m.NormTopK) {
		// llama.cpp's qwen3moe graph has experts in every layer and
		// always renormalizes their weights.
		return "", fmt.Errorf("%w: a mixture with dense layers or without norm_topk_prob in a GGUF export (llama.cpp's qwen3moe has neither)", ErrUnsupported)
	}
	return arch, nil
}

// CheckGGUFSource reports whether the model in dir can be exported to
// GGUF (ErrUnsupported says why not) without reading its weights' data.
func CheckGGUFSource(dir string) error {
	if IsGGUF(dir) {
		return checkGGUF(dir, ggufArchitectures, true)
	}
	s, err := openSource(dir, DefaultGroupSize, ggufArchitectures)
	if err != nil {
		return err
	}
	defer s.w.Close()
	_, err = ggufSupported(s.cfg)
	return err
}

// ggufMeta is the file's metadata: the architecture's hyperparameters,
// name and file type, and the tokenizer.
func ggufMeta(src, arch, typ string, c *modelfile.Config) ([]gguf.KV, error) {
	mc := gguf.ModelConfig{
		ModelType: arch, HiddenSize: c.HiddenSize, NumHiddenLayers: c.NumHiddenLayers,
		NumAttentionHeads: c.NumAttentionHeads, NumKeyValueHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
		IntermediateSize: c.IntermediateSize, RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta,
		MaxPositionEmbeddings: c.MaxPositionEmbeddings, VocabSize: c.VocabSize,
	}
	if m := c.MoE; m != nil {
		mc.Experts, mc.ExpertsUsed, mc.ExpertIntermediate = m.Experts, m.TopK, m.Intermediate
	}
	meta := append(mc.KVs(),
		gguf.KV{Key: gguf.KeyName, Value: gguf.String(filepath.Base(filepath.Clean(src)))},
		gguf.KV{Key: "general.file_type", Value: gguf.Uint32(ggufFileType[typ])},
		gguf.KV{Key: "general.quantization_version", Value: gguf.Uint32(2)},
	)
	tok, err := demo.LoadTokenizer(src)
	if err != nil {
		return nil, fmt.Errorf("%w: tokenizer: %v", ErrUnsupported, err)
	}
	var tc struct {
		AddBOS *bool `json:"add_bos_token"`
	}
	_ = json.Unmarshal(tok.Files[demo.TokenizerConfigFile], &tc)
	addBOS := tok.Pre == "llama-bpe" // Llama 3's tokenizer adds BOS by its post-processor
	if tc.AddBOS != nil {
		addBOS = *tc.AddBOS
	}
	tkv, err := gguf.TokenizerKVs(gguf.HFTokenizer{
		JSON: tok.Files[demo.TokenizerFile], Pre: tok.Pre, BOS: tok.BOS, EOS: tok.EOS,
		AddBOS: addBOS, ChatTemplate: tok.ChatTemplate, VocabSize: c.VocabSize,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: tokenizer: %v", ErrUnsupported, err)
	}
	return append(meta, tkv...), nil
}

// compareGGUF orders GGUF tensor names as llama.cpp's converter writes
// them: token_embd, then the layers in number order, then the rest.
func compareGGUF(a, b string) int {
	rank := func(n string) (int, string) {
		if rest, ok := strings.CutPrefix(n, "blk."); ok {
			i := strings.IndexByte(rest, '.')
			if l, err := strconv.Atoi(rest[:max(i, 0)]); err == nil {
				return 1 + l, rest[i:]
			}
		}
		if n == "token_embd.weight" {
			return 0, n
		}
		return 1 << 30, n
	}
	la, ra := rank(a)
	lb, rb := rank(b)
	if la != lb {
		return la - lb
	}
	return strings.Compare(ra, rb)
}
