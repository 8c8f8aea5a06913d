package modelfile

import (
	"encoding/json"
	"fmt"
	"slices"
)

// GptOss is what gpt-oss's config.json adds, as mlx-lm's gpt_oss.py reads
// it (its defaults are gpt-oss-20b's). The clamped SwiGLU's constants are
// mlx-lm's (alpha 1.702, limit 7.0: it does not read swiglu_limit).
type GptOss struct {
	SwiGLUAlpha float64 `json:"swiglu_alpha"`
	SwiGLULimit float64 `json:"swiglu_limit"`
}

// gptOss applies gpt-oss's keys and mlx-lm's defaults: every layer a
// mixture of num_local_experts experts of intermediate_size (top
// num_experts_per_tok by router logit, softmax over those), head_dim 64,
// rope_theta 150000, an untied lm_head and biased attention (always, as
// mlx-lm builds it), sliding_window 128 on the layers layer_types names
// sliding_attention (default: alternating, sliding first).
func (c *Config) gptOss(data []byte) error {
	var r struct {
		HeadDim          *int64   `json:"head_dim"`
		RopeTheta        *float64 `json:"rope_theta"`
		NumLocalExperts  *int64   `json:"num_local_experts"`
		NumExpertsPerTok *int64   `json:"num_experts_per_tok"`
		SlidingWindow    *int64   `json:"sliding_window"`
		LayerTypes       []string `json:"layer_types"`
		TieWordEmbedding *bool    `json:"tie_word_embeddings"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: gpt_oss: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if r.HeadDim == nil {
		c.HeadDim = 64
	}
	if r.RopeTheta == nil && c.RopeTheta == 10000 { // not given, nor by rope_parameters
		c.RopeTheta = 150000
	}
	if r.TieWordEmbedding != nil && *r.TieWordEmbedding {
		return fmt.Errorf("%w: gpt_oss with tied embeddings (mlx-lm always has an lm_head)", ErrUnsupported)
	}
	c.TieWordEmbeddings, c.AttentionBias = false, true
	experts, topK := int64(128), int64(4)
	if r.NumLocalExperts != nil {
		experts = *r.NumLocalExperts
	}
	if r.NumExpertsPerTok != nil {
		topK = *r.NumExpertsPerTok
	}
	if experts <= 0 || experts > maxExperts || topK <= 0 || topK > experts {
		return bad("%d experts, %d per token (want 1 ≤ per token ≤ experts ≤ %d)", experts, topK, maxExperts)
	}
	c.MoE = &MoE{Experts: int(experts), TopK: int(topK), Intermediate: c.IntermediateSize, SparseStep: 1}
	window := int64(128)
	if r.SlidingWindow != nil {
		window = *r.SlidingWindow
	}
	if window <= 0 || window > maxPositions {
		return bad("sliding_window %d out of range [1, %d]", window, maxPositions)
	}
	types := r.LayerTypes
	if types == nil {
		// mlx-lm: ["sliding_attention", "full_attention"] * (layers // 2).
		for range c.NumHiddenLayers / 2 {
			types = append(types, "sliding_attention", "full_attention")
		}
	}
	sliding, err := layerTypes(types, c.NumHiddenLayers)
	if err != nil {
		return bad("%v", err)
	}
	if !slices.Contains(sliding, true) || !slices.Contains(sliding, false) {
		return bad("layer_types needs both sliding_attention and full_attention layers (mlx-lm looks up one of each)")
	}
	c.Sliding, c.SlidingWindow = sliding, int(window)
	c.GptOss = &GptOss{SwiGLUAlpha: 1.702, SwiGLULimit: 7}
	return nil
}
