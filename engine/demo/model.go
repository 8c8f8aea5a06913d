package demo

import (
	"fmt"

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
	Arch          string // one of archList
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
	// Mixture of experts (qwen3_moe only).
	Experts, ExpertsPerTok, MoEIntermediate, SparseStep int
	// gemma3_text, mistral, mistral3 and ministral3 (0: no window).
	SlidingWindow, SlidingPattern int
	// PartialRotary is phi3's partial_rotary_factor.
	PartialRotary float64
	// GlobalHeadDim is gemma4_text's full-attention head width.
	GlobalHeadDim int
	// Multimodal: the vision-language checkpoint (Options.Multimodal).
	Multimodal bool
}

// qkNorm: the family normalizes each head of q and k (Qwen3, Qwen3-MoE).
func (p Params) qkNorm() bool {
	return p.Arch == modelfile.ArchQwen3 || p.Arch == modelfile.ArchQwen3MoE
}

// sparse reports whether layer l has the mixture of experts.
func (p Params) sparse(l int) bool {
	return p.Arch == modelfile.ArchQwen3MoE && (l+1)%p.SparseStep == 0
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
	var tmpl string
	if o.TemplateFrom != "" {
		if tmpl, err = readTemplate(o.TemplateFrom); err != nil {
			return nil, err
		}
	}
	dt, _ := o.dtype()
	m := &Model{Options: o, DType: dt}
	p := Params{Arch: o.Arch, Layers: o.Layers, Hidden: o.Hidden, Heads: o.Heads, KVHeads: o.KVHeads,
		HeadDim: o.HeadDim, Intermediate: o.Intermediate, TieEmbeddings: !o.Untied, Multimodal: o.Multimodal,
		Experts: o.Experts, ExpertsPerTok: o.ExpertsPerTok, MoEIntermediate: o.MoEIntermediate, SparseStep: o.SparseStep}
	if p.Arch == modelfile.ArchLlama {
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 131072, 1e-5, 500000
		p.RopeScaling = map[string]any{"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
			"original_max_position_embeddings": 8192, "rope_type": "llama3"}
	} else {
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 40960, 1e-6, 1000000
	}
	if p.Arch == modelfile.ArchGemma3Text {
		p.gemma(o)
	}
	if p.Arch == modelfile.ArchGemma4Text {
		p.gemma4(o)
	}
	p.family(o)
	switch p.Arch {
	case modelfile.ArchDeepseekV3:
		p.deepseek()
	case modelfile.ArchGlm4MoE:
		p.glm()
	case modelfile.ArchQwen3Next, modelfile.ArchQwen35, modelfile.ArchQwen35MoE:
		p.qwen3Next()
	}
	if o.VocabFrom != "" {
		m.Tokenizer, err = loadTokenizer(o.VocabFrom)
	} else {
		m.Tokenizer, err = builtinTokenizer(p.MaxPositions, builtinTemplate(p.Arch))
	}
	if err != nil {
		return nil, err
	}
	if tmpl != "" {
		// Written as chat_template.jinja, which takes precedence over
		// tokenizer_config.json's chat_template (as in transformers).
		m.Tokenizer.ChatTemplate = tmpl
		m.Tokenizer.Files["chat_template.jinja"] = []byte(tmpl)
	}
	p.Vocab = (len(m.Tokenizer.Tokens) + vocabMultiple - 1) / vocabMultiple * vocabMultiple
	m.Params = p
	if err := m.initWeights(); err != nil {
		return nil, err
	}
	if p.Arch == modelfile.ArchPhi3 {
		m.fusePhi3()
	}
	m.Config = m.configJSON()
	if p.Multimodal {
		m.Config = m.multimodalConfig(m.Config)
	}
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
func (m *Model) encode(vals []float32) []byte { return tensor.Encode(m.DType, vals) }
