package demo

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// Tensor is a float weight of the in-memory model, named as in Hugging
// Face checkpoints, row-major, its values exactly representable in the
// model's dtype.
type Tensor struct {
	Name  string
	Shape []int64
	Data  []float32
}

// Params are the model's hyperparameters, as config.json states them.
type Params struct {
	Arch          string // "llama" or "qwen3"
	Layers        int
	Hidden        int
	Heads         int
	KVHeads       int
	HeadDim       int
	Intermediate  int
	Vocab         int // embedding rows: the tokenizer's size rounded up to a multiple of 64
	MaxPositions  int
	RMSNormEps    float64
	RopeTheta     float64
	RopeScaling   map[string]any // nil: none
	TieEmbeddings bool
}

// Model is a demo model in memory: everything Write puts on disk, in a
// form other writers (GGUF) can use directly.
type Model struct {
	Options    Options // as resolved, defaults filled in
	Params     Params
	DType      tensor.DType // BF16, F16 or F32
	Tensors    []Tensor     // float weights, in a fixed order
	Tokenizer  *Tokenizer
	Config     map[string]any // config.json
	Generation map[string]any // generation_config.json
}

// vocabMultiple is what embedding rows are padded to, as Qwen pads its
// 151669 tokens to 151936 rows.
const vocabMultiple = 64

// Build makes the model described by opts in memory. The same options and
// seed always give the same weights.
func Build(opts Options) (*Model, error) {
	o, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	dt, _ := o.dtype()
	m := &Model{Options: o, DType: dt}
	p := Params{Arch: o.Arch, Layers: o.Layers, Hidden: o.Hidden, Heads: o.Heads, KVHeads: o.KVHeads,
		HeadDim: o.HeadDim, Intermediate: o.Intermediate, TieEmbeddings: !o.Untied}
	if p.Arch == modelfile.ArchLlama {
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 131072, 1e-5, 500000
		p.RopeScaling = map[string]any{"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
			"original_max_position_embeddings": 8192, "rope_type": "llama3"}
	} else {
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 40960, 1e-6, 1000000
	}
	if o.VocabFrom != "" {
		m.Tokenizer, err = loadTokenizer(o.VocabFrom)
	} else {
		m.Tokenizer, err = builtinTokenizer(p.MaxPositions)
	}
	if err != nil {
		return nil, err
	}
	p.Vocab = (len(m.Tokenizer.Tokens) + vocabMultiple - 1) / vocabMultiple * vocabMultiple
	m.Params = p
	m.initWeights()
	m.Config = m.configJSON()
	m.Generation = m.generationJSON()
	// The config we write must be one our own reader accepts.
	b, err := marshal(m.Config, false)
	if err != nil {
		return nil, fmt.Errorf("demo: config: %w", err)
	}
	if _, err := modelfile.ParseConfig(b); err != nil {
		return nil, fmt.Errorf("demo: generated config is invalid: %w", err)
	}
	return m, nil
}

// initWeights draws the weights. Embeddings are N(0, 1), so the tied
// output layer scores the current token's own row near hidden_size against
// N(0, hidden_size) for the others: greedy decoding has a clear top-1
// (mlx-lm on the default model: top-1 margin median ~20 logits, minimum
// ~1), and tends to repeat its last token. Linear layers are N(0, 1/in), so
// every layer moves the residual stream and logits depend on the context;
// larger layers make the output varied but the margins thin (a coin toss
// between backends). Norms are 1. Embedding rows past the tokenizer are
// zero, so no id without a token ever wins.
func (m *Model) initWeights() {
	p := m.Params
	rng := rand.New(rand.NewPCG(m.Options.Seed, 0x9e3779b97f4a7c15))
	round := m.roundFunc()
	normal := func(name string, std float64, rows, cols int) {
		data := make([]float32, rows*cols)
		for i := range data {
			data[i] = round(float32(rng.NormFloat64() * std))
		}
		m.Tensors = append(m.Tensors, Tensor{Name: name, Shape: []int64{int64(rows), int64(cols)}, Data: data})
	}
	linear := func(name string, out, in int) { normal(name, 1/math.Sqrt(float64(in)), out, in) }
	ones := func(name string, n int) {
		data := make([]float32, n)
		for i := range data {
			data[i] = 1
		}
		m.Tensors = append(m.Tensors, Tensor{Name: name, Shape: []int64{int64(n)}, Data: data})
	}
	normal("model.embed_tokens.weight", 1, p.Vocab, p.Hidden)
	clear(m.Tensors[0].Data[len(m.Tokenizer.Tokens)*p.Hidden:])
	q, kv := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		ones(pre+"input_layernorm.weight", p.Hidden)
		linear(pre+"self_attn.q_proj.weight", q, p.Hidden)
		linear(pre+"self_attn.k_proj.weight", kv, p.Hidden)
		linear(pre+"self_attn.v_proj.weight", kv, p.Hidden)
		linear(pre+"self_attn.o_proj.weight", p.Hidden, q)
		if p.Arch == modelfile.ArchQwen3 {
			ones(pre+"self_attn.q_norm.weight", p.HeadDim)
			ones(pre+"self_attn.k_norm.weight", p.HeadDim)
		}
		ones(pre+"post_attention_layernorm.weight", p.Hidden)
		linear(pre+"mlp.gate_proj.weight", p.Intermediate, p.Hidden)
		linear(pre+"mlp.up_proj.weight", p.Intermediate, p.Hidden)
		linear(pre+"mlp.down_proj.weight", p.Hidden, p.Intermediate)
	}
	ones("model.norm.weight", p.Hidden)
	if !p.TieEmbeddings {
		normal("lm_head.weight", 1, p.Vocab, p.Hidden)
		clear(m.Tensors[len(m.Tensors)-1].Data[len(m.Tokenizer.Tokens)*p.Hidden:])
	}
}

// dtype maps the --dtype spelling to a tensor dtype.
func (o Options) dtype() (tensor.DType, error) {
	switch o.DType {
	case "bf16":
		return tensor.BF16, nil
	case "f16":
		return tensor.F16, nil
	case "f32":
		return tensor.F32, nil
	}
	return tensor.Invalid, fmt.Errorf("demo: unknown dtype %q (want bf16, f16 or f32)", o.DType)
}

// torchDType is config.json's spelling of the model dtype.
func (m *Model) torchDType() string {
	return map[tensor.DType]string{tensor.BF16: "bfloat16", tensor.F16: "float16", tensor.F32: "float32"}[m.DType]
}

// roundFunc rounds a float32 to the nearest value of the model dtype.
func (m *Model) roundFunc() func(float32) float32 {
	switch m.DType {
	case tensor.BF16:
		return func(f float32) float32 { return tensor.BF16ToF32(tensor.F32ToBF16(f)) }
	case tensor.F16:
		return func(f float32) float32 { return tensor.F16ToF32(tensor.F32ToF16(f)) }
	}
	return func(f float32) float32 { return f }
}

// encode stores float32 values in the model dtype, little-endian.
func (m *Model) encode(vals []float32) []byte {
	switch m.DType {
	case tensor.BF16, tensor.F16:
		conv := tensor.F32ToBF16
		if m.DType == tensor.F16 {
			conv = tensor.F32ToF16
		}
		b := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(b[2*i:], conv(v))
		}
		return b
	}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
