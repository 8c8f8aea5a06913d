package modelfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Architecture names used across the engine.
const (
	ArchLlama = "llama"
	ArchQwen2 = "qwen2"
	ArchQwen3 = "qwen3"
	// ArchQwen3MoE is Qwen3's mixture of experts (Qwen3-30B-A3B,
	// Qwen3-235B-A22B); see MoE.
	ArchQwen3MoE = "qwen3_moe"
	// ArchGemma3Text is Gemma 3's text model (mlx-lm's gemma3_text).
	ArchGemma3Text = "gemma3_text"
	// ArchPhi3 is Phi-3, Phi-3.5 and Phi-4-mini (fused qkv_proj and
	// gate_up_proj, partial rotary, longrope).
	ArchPhi3 = "phi3"
	// ArchMistral is Mistral's text models (mlx-lm runs them as llama).
	ArchMistral = "mistral"
	// ArchMistral3 is Mistral 3's text model (Mistral Small 3.1/3.2): a
	// mistral config inside text_config, weights under "language_model.";
	// the vision tower is not loaded.
	ArchMistral3 = "mistral3"
	// ArchMinistral3 is Ministral 3 (3B, 8B, 14B): Mistral 3 whose
	// text_config says ministral3, a llama block whose queries are scaled
	// by their position (see QueryScale).
	ArchMinistral3 = "ministral3"
	// ArchGptOss is gpt-oss (20b, 120b): a mixture of biased experts with
	// a clamped SwiGLU, attention sinks, alternating sliding and full
	// layers; see GptOss.
	ArchGptOss = "gpt_oss"
	// ArchDeepseekV3 is DeepSeek-V3 (and R1, V3.1, Kimi K2, which mlx-lm
	// runs as deepseek_v3): multi-head latent attention (see MLA) and a
	// sigmoid-routed mixture with shared experts (see Router).
	ArchDeepseekV3 = "deepseek_v3"
	// ArchGlm4MoE is GLM-4.5 and GLM-4.6: biased attention on half-rotated
	// heads and DeepSeek-V3's sigmoid-routed mixture (see Router).
	ArchGlm4MoE = "glm4_moe"
)

// ConfigFile and GenerationConfigFile are the file names in a model
// directory.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
)

// Limits that reject absurd values before anything is sized from them.
const (
	maxHidden       = 1 << 16
	maxIntermediate = 1 << 18
	maxLayers       = 1 << 10
	maxHeads        = 1 << 10
	maxHeadDim      = 1 << 10
	maxVocab        = 1 << 22
	maxPositions    = 1 << 24
)

// archFor maps a transformers class name, or a model_type, to an
// architecture name ("" if unknown).
func archFor(name string) string {
	switch name {
	case "LlamaForCausalLM", "llama":
		return ArchLlama
	case "Qwen2ForCausalLM", "qwen2":
		return ArchQwen2
	case "Qwen3ForCausalLM", "qwen3":
		return ArchQwen3
	case "Qwen3MoeForCausalLM", "qwen3_moe":
		return ArchQwen3MoE
	case "Gemma3ForCausalLM", "gemma3_text":
		return ArchGemma3Text
	case "Gemma4ForCausalLM", "gemma4_text":
		return ArchGemma4Text
	case "Phi3ForCausalLM", "phi3":
		return ArchPhi3
	case "MistralForCausalLM", "mistral":
		return ArchMistral
	case "Ministral3ForCausalLM", "ministral3":
		return ArchMinistral3
	case "GptOssForCausalLM", "gpt_oss":
		return ArchGptOss
	case "DeepseekV3ForCausalLM", "deepseek_v3":
		return ArchDeepseekV3
	case "Glm4MoeForCausalLM", "glm4_moe":
		return ArchGlm4MoE
	case "Qwen3NextForCausalLM", "qwen3_next":
		return ArchQwen3Next
	case "qwen3_5":
		return ArchQwen35
	case "qwen3_5_moe":
		return ArchQwen35MoE
	}
	return ""
}

// Config is a validated config.json with mlx-lm's defaults applied.
type Config struct {
	Architecture  string   `json:"architecture"`  // llama, qwen2, qwen3 or gemma3_text
	Architectures []string `json:"architectures"` // as written in the file
	ModelType     string   `json:"model_type,omitempty"`

	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim"`
	VocabSize             int     `json:"vocab_size"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`

	RopeTheta   float64      `json:"rope_theta"`
	RopeScaling *RopeScaling `json:"rope_scaling"` // nil: no scaling
	// PartialRotaryFactor is the share of each head RoPE rotates (phi3's
	// partial_rotary_factor; 1 for every other family).
	PartialRotaryFactor float64 `json:"partial_rotary_factor"`

	TieWordEmbeddings bool `json:"tie_word_embeddings"`
	// AttentionBias: q/k/v/o carry biases (Llama attention_bias). Qwen2
	// always has q/k/v biases whatever this says.
	AttentionBias bool `json:"attention_bias"`
	MLPBias       bool `json:"mlp_bias"`

	BOSTokenIDs TokenIDs `json:"bos_token_id"`
	EOSTokenIDs TokenIDs `json:"eos_token_id"`
	TorchDType  string   `json:"torch_dtype,omitempty"` // bfloat16, float16, float32 or ""

	Quantization *Quantization `json:"quantization"` // nil: not quantized

	// MoE is the mixture-of-experts block (qwen3_moe), nil for a dense
	// model.
	MoE *MoE `json:"moe,omitempty"`
	// Gemma holds what only Gemma 3 has (nil for other families).
	Gemma *GemmaConfig `json:"gemma,omitempty"`
	// GptOss holds what only gpt-oss has (nil for other families).
	GptOss *GptOss `json:"gpt_oss,omitempty"`
	// MLA is DeepSeek-V3's latent attention (nil for other families).
	MLA *MLA `json:"mla,omitempty"`
	// Router is a sigmoid, group-limited mixture's routing (deepseek_v3,
	// glm4_moe; nil for softmax-routed families).
	Router *Router `json:"router,omitempty"`
	// QKNorm: glm4_moe's use_qk_norm, an RMSNorm over each head of q and k
	// (Qwen3 always has them).
	QKNorm bool `json:"qk_norm,omitempty"`
	// Sliding marks the layers that attend to the last SlidingWindow
	// positions only (llama and mistral: layer_types with
	// "sliding_attention", as mlx-lm's llama.py reads them); nil when every
	// layer attends to all positions. Gemma's are in Gemma.
	Sliding       []bool `json:"sliding,omitempty"`
	SlidingWindow int    `json:"sliding_window,omitempty"`
	// QueryScale is ministral3's position-dependent query scale (nil for
	// other families).
	QueryScale *QueryScale `json:"query_scale,omitempty"`
	// WeightPrefix is put before every tensor name the model looks up
	// ("language_model." for mistral3, whose file also holds a vision
	// tower).
	WeightPrefix string `json:"weight_prefix,omitempty"`
	// DeltaNet is the Gated DeltaNet linear attention of hybrid families
	// (qwen3_next), nil for others.
	DeltaNet *DeltaNet `json:"delta_net,omitempty"`
	// Gemma4 holds what only Gemma 4 has (nil for other families).
	Gemma4 *Gemma4 `json:"gemma4,omitempty"`
}

type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            *int64          `json:"hidden_size"`
	IntermediateSize      *int64          `json:"intermediate_size"`
	NumHiddenLayers       *int64          `json:"num_hidden_layers"`
	NumAttentionHeads     *int64          `json:"num_attention_heads"`
	NumKeyValueHeads      *int64          `json:"num_key_value_heads"`
	HeadDim               *int64          `json:"head_dim"`
	VocabSize             *int64          `json:"vocab_size"`
	MaxPositionEmbeddings *int64          `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	OriginalMaxPositions  *int64          `json:"original_max_position_embeddings"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	BOSTokenID            TokenIDs        `json:"bos_token_id"`
	EOSTokenID            TokenIDs        `json:"eos_token_id"`
	TorchDType            *string         `json:"torch_dtype"`
	DType                 *string         `json:"dtype"`
	Quantization          json.RawMessage `json:"quantization"`
	QuantizationConfig    json.RawMessage `json:"quantization_config"`
	rawMoE
}

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses and validates the contents of a config.json.
func ParseConfig(data []byte) (*Config, error) {
	if c, ok, err := qwen35Config(data); ok || err != nil {
		return c, err
	}
	if c, ok, err := gemmaMultimodalConfig(data); ok || err != nil {
		return c, err
	}
	if text, ok, err := textConfig(data); err != nil {
		return nil, err
	} else if ok {
		return parseMistral3(data, text)
	}
	return parseFlat(data)
}

// parseFlat parses a config whose text model is at its top level.
func parseFlat(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c := &Config{Architectures: r.Architectures, ModelType: r.ModelType}
	for _, a := range r.Architectures {
		if c.Architecture = archFor(a); c.Architecture != "" {
			break
		}
	}
	if c.Architecture == "" && len(r.Architectures) == 0 {
		c.Architecture = archFor(r.ModelType)
	}
	if c.Architecture == "" {
		return nil, fmt.Errorf("%w: architectures %q, model_type %q (want LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, MistralForCausalLM or Mistral3ForConditionalGeneration)", ErrUnknownArchitecture, r.Architectures, r.ModelType)
	}
	if err := c.sizes(&r); err != nil {
		return nil, err
	}
	if err := c.rope(&r); err != nil {
		return nil, err
	}
	if err := c.phi3(&r); err != nil {
		return nil, err
	}
	if c.Architecture == ArchQwen3MoE {
		moe, err := r.rawMoE.parse(c.NumHiddenLayers)
		if err != nil {
			return nil, err
		}
		c.MoE = moe
	}
	c.TieWordEmbeddings = orBool(r.TieWordEmbeddings, c.Architecture != ArchQwen3 && c.Architecture != ArchQwen3MoE && c.Architecture != ArchQwen3Next)
	c.AttentionBias = orBool(r.AttentionBias, false)
	c.MLPBias = orBool(r.MLPBias, false)
	if c.Architecture == ArchGptOss {
		if err := c.gptOss(data); err != nil {
			return nil, err
		}
	}
	if c.Architecture == ArchDeepseekV3 {
		if err := c.deepseekV3(data); err != nil {
			return nil, err
		}
	}
	if c.Architecture == ArchGlm4MoE {
		if err := c.glm4MoE(data); err != nil {
			return nil, err
		}
	}
	if c.Architecture == ArchQwen3Next || c.Architecture == ArchQwen35 || c.Architecture == ArchQwen35MoE {
		if err := c.qwen3Next(data, &r); err != nil {
			return nil, err
		}
	}
	if c.Architecture == ArchGemma4Text {
		if err := c.gemma4(data, &r); err != nil {
			return nil, err
		}
	}
	c.BOSTokenIDs, c.EOSTokenIDs = r.BOSTokenID, r.EOSTokenID
	if err := c.BOSTokenIDs.check("bos_token_id", c.VocabSize); err != nil {
		return nil, err
	}
	if err := c.EOSTokenIDs.check("eos_token_id", c.VocabSize); err != nil {
		return nil, err
	}
	dt := r.TorchDType
	if dt == nil {
		dt = r.DType
	}
	if dt != nil {
		c.TorchDType = strings.TrimPrefix(*dt, "torch.")
		switch c.TorchDType {
		case "bfloat16", "float16", "float32":
		default:
			return nil, fmt.Errorf("%w: torch_dtype %q (want bfloat16, float16 or float32)", ErrInvalidConfig, *dt)
		}
	}
	q, err := parseQuantization(r.Quantization, r.QuantizationConfig)
	if err != nil {
		return nil, err
	}
	c.Quantization = q
	switch c.Architecture {
	case ArchGemma3Text:
		if c.Gemma, err = parseGemma(data, c); err != nil {
			return nil, err
		}
	case ArchLlama, ArchMistral, ArchMinistral3:
		if c.SlidingWindow, c.Sliding, err = parseLlamaWindows(data, c.NumHiddenLayers); err != nil {
			return nil, err
		}
	}
	if c.Architecture == ArchMinistral3 {
		if err := c.ministral3(&r); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// sizes fills and checks the dimensions.
func (c *Config) sizes(r *rawConfig) error {
	fields := []struct {
		name string
		v    *int64
		dst  *int
		max  int64
	}{
		{"hidden_size", r.HiddenSize, &c.HiddenSize, maxHidden},
		{"intermediate_size", r.IntermediateSize, &c.IntermediateSize, maxIntermediate},
		{"num_hidden_layers", r.NumHiddenLayers, &c.NumHiddenLayers, maxLayers},
		{"num_attention_heads", r.NumAttentionHeads, &c.NumAttentionHeads, maxHeads},
		{"vocab_size", r.VocabSize, &c.VocabSize, maxVocab},
	}
	for _, f := range fields {
		if f.v == nil {
			return fmt.Errorf("%w: missing %s", ErrInvalidConfig, f.name)
		}
		if *f.v <= 0 || *f.v > f.max {
			return fmt.Errorf("%w: %s %d out of range [1, %d]", ErrInvalidConfig, f.name, *f.v, f.max)
		}
		*f.dst = int(*f.v)
	}
	optional := []struct {
		name string
		v    *int64
		dst  *int
		def  int
		max  int64
	}{
		{"num_key_value_heads", r.NumKeyValueHeads, &c.NumKeyValueHeads, c.NumAttentionHeads, maxHeads},
		{"head_dim", r.HeadDim, &c.HeadDim, c.HiddenSize / c.NumAttentionHeads, maxHeadDim},
		{"max_position_embeddings", r.MaxPositionEmbeddings, &c.MaxPositionEmbeddings, 2048, maxPositions},
	}
	for _, f := range optional {
		if f.v == nil {
			*f.dst = f.def
			continue
		}
		if *f.v <= 0 || *f.v > f.max {
			return fmt.Errorf("%w: %s %d out of range [1, %d]", ErrInvalidConfig, f.name, *f.v, f.max)
		}
		*f.dst = int(*f.v)
	}
	if r.HeadDim == nil && c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("%w: num_attention_heads %d does not divide hidden_size %d (and head_dim is not given)", ErrInvalidConfig, c.NumAttentionHeads, c.HiddenSize)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("%w: num_key_value_heads %d does not divide num_attention_heads %d", ErrInvalidConfig, c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("%w: head_dim %d is odd (RoPE rotates pairs)", ErrInvalidConfig, c.HeadDim)
	}
	c.RMSNormEps = 1e-6
	if r.RMSNormEps != nil {
		c.RMSNormEps = *r.RMSNormEps
		if !positive(c.RMSNormEps) || c.RMSNormEps >= 1 {
			return fmt.Errorf("%w: rms_norm_eps %v out of range (0, 1)", ErrInvalidConfig, c.RMSNormEps)
		}
	}
	return nil
}

// rope fills rope_theta and rope_scaling, also from transformers v5's
// "rope_parameters" block.
func (c *Config) rope(r *rawConfig) error {
	c.RopeTheta = 10000
	if c.Architecture == ArchQwen2 {
		c.RopeTheta = 1e6
	}
	scaling, theta, err := parseRope("rope_scaling", r.RopeScaling)
	if err != nil {
		return err
	}
	if isNull(r.RopeScaling) && !isNull(r.RopeParameters) {
		scaling, theta, err = parseRope("rope_parameters", r.RopeParameters)
		if err != nil {
			return err
		}
	}
	c.RopeScaling = scaling
	if r.RopeTheta != nil {
		theta = r.RopeTheta
	}
	if theta != nil {
		c.RopeTheta = *theta
	}
	if !positive(c.RopeTheta) {
		return fmt.Errorf("%w: rope_theta %v must be positive", ErrInvalidConfig, c.RopeTheta)
	}
	return nil
}

// KVDims are the KV heads and head width one position of one layer
// caches (keys and values alike): num_key_value_heads × head_dim, or for
// latent attention one head of the latent and the rotated key features.
func (c *Config) KVDims() (heads, dim int) {
	if c.MLA != nil {
		return 1, c.MLA.CacheDim()
	}
	return c.NumKeyValueHeads, c.HeadDim
}

// MaxCut is the last layer a later pipeline stage may start at (a
// stage boundary past it would separate layers that must stay together:
// Gemma 4's KV-shared layers and their sources); NumHiddenLayers when any
// boundary will do.
func (c *Config) MaxCut() int {
	if g := c.Gemma4; g != nil && len(g.Sliding) == c.NumHiddenLayers {
		return g.MaxCut(c.NumHiddenLayers)
	}
	return c.NumHiddenLayers
}

// KVFloatsPerPosition is the number of floats one position caches over
// all the layers, keys and values: KVFloatsOfLayer summed.
func (c *Config) KVFloatsPerPosition() int64 {
	var n int64
	for l := range c.NumHiddenLayers {
		n += c.KVFloatsOfLayer(l)
	}
	return n
}

// KVFloatsOfLayer is the number of floats one position caches in layer
// l, keys and values: KVDims if the layer has a cache of its own — not
// Gemma 4's KV-shared layers nor Gated DeltaNet layers — at its head
// width.
func (c *Config) KVFloatsOfLayer(l int) int64 {
	heads, dim := c.KVDims()
	if g := c.Gemma4; g != nil && len(g.Sliding) == c.NumHiddenLayers {
		if l >= c.NumHiddenLayers-g.KVShared {
			return 0
		}
		return int64(2 * heads * g.HeadDimOf(l, dim))
	}
	if c.DeltaNet.Linear(l) {
		return 0
	}
	return int64(2 * heads * dim)
}

func orBool(v *bool, def bool) bool {
	if v == nil {
		return def
	}
	return *v
}
