package gguf

import (
	"fmt"
	"math"
)

// ModelConfig holds the Hugging Face config.json fields a decoder-only
// transformer needs, as GGUF metadata states them. JSON names follow
// config.json.
type ModelConfig struct {
	// ModelType is config.json's model_type: general.architecture
	// ("llama", "qwen2", "qwen3") mapped by HFArch ("qwen3moe" →
	// "qwen3_moe").
	ModelType             string  `json:"model_type"`
	HiddenSize            int     `json:"hidden_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim"`
	IntermediateSize      int     `json:"intermediate_size"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	RopeTheta             float64 `json:"rope_theta"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	VocabSize             int     `json:"vocab_size"`
	// TieWordEmbeddings is true when the file has no output.weight: the
	// output projection reuses token_embd.weight.
	TieWordEmbeddings bool `json:"tie_word_embeddings"`
	// Mixture of experts ({arch}.expert_*; all zero for a dense model):
	// Experts experts of ExpertIntermediate rows each, ExpertsUsed of
	// them per token. NormTopK is {arch}.expert_weights_norm, nil when
	// the file does not say (llama.cpp's qwen3moe graph always
	// renormalizes).
	Experts            int   `json:"num_experts,omitempty"`
	ExpertsUsed        int   `json:"num_experts_per_tok,omitempty"`
	ExpertIntermediate int   `json:"moe_intermediate_size,omitempty"`
	NormTopK           *bool `json:"norm_topk_prob,omitempty"`
	// SlidingWindow is {arch}.attention.sliding_window (0 when absent):
	// the window of the layers that slide (gpt-oss: every other one,
	// the first included).
	SlidingWindow int `json:"sliding_window,omitempty"`
	// Yarn is the yarn RoPE scaling KVs writes (nil: none). ModelConfig
	// does not fill it: the model loader reads rope.scaling.* itself.
	Yarn *YarnScaling `json:"-"`
}

// YarnScaling is llama.cpp's rope.scaling.* for yarn: the factor, the
// context length trained before scaling and the correction betas.
type YarnScaling struct {
	Factor             float64
	OriginalContext    int
	BetaFast, BetaSlow float64
}

// Defaults llama.cpp assumes when a key is absent.
const (
	defaultRopeTheta = 10000
	defaultRMSEps    = 1e-5
)

// ModelConfig maps the file's metadata to a ModelConfig. Required:
// general.architecture, {arch}.embedding_length, block_count,
// attention.head_count and feed_forward_length. head_count_kv defaults to
// head_count, key_length to embedding_length/head_count, rope.freq_base to
// 10000, layer_norm_rms_epsilon to 1e-5. vocab_size is {arch}.vocab_size,
// else the rows of token_embd.weight, else the token count. With
// {arch}.expert_count above zero, expert_used_count and
// expert_feed_forward_length are required too.
func (f *File) ModelConfig() (ModelConfig, error) {
	arch := f.Architecture()
	c := ModelConfig{ModelType: HFArch(arch)}
	if arch == "" {
		return c, fmt.Errorf("gguf: %s: %s is missing", f.Name, KeyArchitecture)
	}
	var err error
	need := func(dst *int, suffix string) {
		if err != nil {
			return
		}
		key := ArchKey(arch, suffix)
		n, ok := f.Meta(key).AsInt64()
		if !ok || n <= 0 || n > math.MaxInt32 {
			err = fmt.Errorf("gguf: %s: %s is missing or not a positive integer (%v)", f.Name, key, f.Meta(key))
			return
		}
		*dst = int(n)
	}
	optional := func(dst *int, suffix string, def int) {
		*dst = def
		if n, ok := f.Meta(ArchKey(arch, suffix)).AsInt64(); ok && n > 0 && n <= math.MaxInt32 {
			*dst = int(n)
		}
	}
	need(&c.HiddenSize, SuffixEmbeddingLen)
	need(&c.NumHiddenLayers, SuffixBlockCount)
	need(&c.NumAttentionHeads, SuffixHeadCount)
	need(&c.IntermediateSize, SuffixFeedForwardLen)
	if err != nil {
		return c, err
	}
	optional(&c.NumKeyValueHeads, SuffixHeadCountKV, c.NumAttentionHeads)
	optional(&c.HeadDim, SuffixKeyLength, c.HiddenSize/c.NumAttentionHeads)
	optional(&c.MaxPositionEmbeddings, SuffixContextLength, 0)
	optional(&c.Experts, SuffixExpertCount, 0)
	if c.Experts > 0 {
		need(&c.ExpertsUsed, SuffixExpertUsedCount)
		need(&c.ExpertIntermediate, SuffixExpertFFLength)
		if err != nil {
			return c, err
		}
		if v, ok := f.Meta(ArchKey(arch, SuffixExpertWeightsNorm)).Any().(bool); ok {
			c.NormTopK = &v
		}
	}
	optional(&c.SlidingWindow, SuffixSlidingWindow, 0)

	c.RopeTheta = defaultRopeTheta
	if v, ok := f.Meta(ArchKey(arch, SuffixRopeFreqBase)).AsFloat64(); ok {
		c.RopeTheta = v
	}
	c.RMSNormEps = defaultRMSEps
	if v, ok := f.Meta(ArchKey(arch, SuffixRMSEps)).AsFloat64(); ok {
		c.RMSNormEps = v
	}

	if n, ok := f.Meta(ArchKey(arch, SuffixVocabSize)).AsInt64(); ok && n > 0 && n <= math.MaxInt32 {
		c.VocabSize = int(n)
	} else if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Shape) == 2 {
		c.VocabSize = int(t.Shape[0])
	} else if v, ok := f.Lookup(KeyTokens); ok {
		c.VocabSize = v.Len()
	}
	_, hasOutput := f.Tensor("output.weight")
	c.TieWordEmbeddings = !hasOutput
	return c, nil
}

// KVs returns the general.architecture (GGUFArch of ModelType) and
// {arch}.* metadata describing c, typed as llama.cpp writes them (uint32
// sizes, float32 rope base and epsilon). Key and value lengths and the
// rotary dimension are all HeadDim. A mixture adds the expert_* keys, a
// sliding window attention.sliding_window, yarn the rope.scaling.* keys.
func (c ModelConfig) KVs() []KV {
	a := GGUFArch(c.ModelType)
	kvs := []KV{
		{KeyArchitecture, String(a)},
		{ArchKey(a, SuffixContextLength), Uint32(uint32(c.MaxPositionEmbeddings))},
		{ArchKey(a, SuffixEmbeddingLen), Uint32(uint32(c.HiddenSize))},
		{ArchKey(a, SuffixBlockCount), Uint32(uint32(c.NumHiddenLayers))},
		{ArchKey(a, SuffixFeedForwardLen), Uint32(uint32(c.IntermediateSize))},
		{ArchKey(a, SuffixHeadCount), Uint32(uint32(c.NumAttentionHeads))},
		{ArchKey(a, SuffixHeadCountKV), Uint32(uint32(c.NumKeyValueHeads))},
		{ArchKey(a, SuffixKeyLength), Uint32(uint32(c.HeadDim))},
		{ArchKey(a, SuffixValueLength), Uint32(uint32(c.HeadDim))},
		{ArchKey(a, SuffixRopeDimCount), Uint32(uint32(c.HeadDim))},
		{ArchKey(a, SuffixRopeFreqBase), Float32(float32(c.RopeTheta))},
		{ArchKey(a, SuffixRMSEps), Float32(float32(c.RMSNormEps))},
	}
	if c.VocabSize > 0 {
		kvs = append(kvs, KV{ArchKey(a, SuffixVocabSize), Uint32(uint32(c.VocabSize))})
	}
	if c.Experts > 0 {
		kvs = append(kvs,
			KV{ArchKey(a, SuffixExpertCount), Uint32(uint32(c.Experts))},
			KV{ArchKey(a, SuffixExpertUsedCount), Uint32(uint32(c.ExpertsUsed))},
			KV{ArchKey(a, SuffixExpertFFLength), Uint32(uint32(c.ExpertIntermediate))},
		)
		if c.NormTopK != nil {
			kvs = append(kvs, KV{ArchKey(a, SuffixExpertWeightsNorm), Bool(*c.NormTopK)})
		}
	}
	if c.SlidingWindow > 0 {
		kvs = append(kvs, KV{ArchKey(a, SuffixSlidingWindow), Uint32(uint32(c.SlidingWindow))})
	}
	if y := c.Yarn; y != nil {
		kvs = append(kvs,
			KV{ArchKey(a, SuffixRopeScalingType), String("yarn")},
			KV{ArchKey(a, SuffixRopeScalingFactor), Float32(float32(y.Factor))},
			KV{ArchKey(a, SuffixRopeScalingOrigCtx), Uint32(uint32(y.OriginalContext))},
			KV{ArchKey(a, SuffixRopeYarnBetaFast), Float32(float32(y.BetaFast))},
			KV{ArchKey(a, SuffixRopeYarnBetaSlow), Float32(float32(y.BetaSlow))},
		)
	}
	return kvs
}
