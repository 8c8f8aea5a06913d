package modelfile

import (
	"encoding/json"
	"fmt"
)

// glm4MoE reads GLM-4.5's and GLM-4.6's keys (mlx-lm's glm4_moe.py, which
// has no defaults for them): Qwen3-MoE-like attention with q/k/v biases
// (attention_bias), optional per-head q/k norms (use_qk_norm), RoPE on
// int(head_dim · partial_rotary_factor) features with rope_theta only
// (mlx-lm's nn.RoPE: rope_scaling is not read), and DeepSeek-V3's sigmoid
// router (see Router) in every layer from first_k_dense_replace on; an
// lm_head always (mlx-lm never ties it).
func (c *Config) glm4MoE(data []byte) error {
	var r struct {
		HeadDim          *int64   `json:"head_dim"`
		PartialRotary    *float64 `json:"partial_rotary_factor"`
		UseQKNorm        *bool    `json:"use_qk_norm"`
		RoutedExperts    *int64   `json:"n_routed_experts"`
		SharedExperts    *int64   `json:"n_shared_experts"`
		TopK             *int64   `json:"num_experts_per_tok"`
		MoEIntermediate  *int64   `json:"moe_intermediate_size"`
		ScalingFactor    *float64 `json:"routed_scaling_factor"`
		TopKMethod       *string  `json:"topk_method"`
		NormTopK         *bool    `json:"norm_topk_prob"`
		Groups           *int64   `json:"n_group"`
		TopKGroups       *int64   `json:"topk_group"`
		FirstDense       *int64   `json:"first_k_dense_replace"`
		TieWordEmbedding *bool    `json:"tie_word_embeddings"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: glm4_moe: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if r.TopKMethod != nil && *r.TopKMethod != "noaux_tc" {
		return fmt.Errorf("%w: glm4_moe topk_method %q (mlx-lm runs noaux_tc only)", ErrUnsupported, *r.TopKMethod)
	}
	if r.TieWordEmbedding != nil && *r.TieWordEmbedding {
		return fmt.Errorf("%w: glm4_moe with tied embeddings (mlx-lm always reads an lm_head)", ErrUnsupported)
	}
	c.TieWordEmbeddings = false
	if r.HeadDim == nil {
		return bad("missing head_dim")
	}
	c.PartialRotaryFactor = 0.5
	if f := r.PartialRotary; f != nil {
		if !positive(*f) || *f > 1 {
			return bad("partial_rotary_factor %v out of range (0, 1]", *f)
		}
		c.PartialRotaryFactor = *f
	}
	if dims := c.RotaryDims(); dims <= 0 || dims%2 != 0 {
		return bad("partial_rotary_factor %v rotates %d of %d features (want an even number > 0)", c.PartialRotaryFactor, dims, c.HeadDim)
	}
	c.RopeScaling = nil
	c.QKNorm = orBool(r.UseQKNorm, false)
	if r.RoutedExperts == nil {
		return bad("missing n_routed_experts")
	}
	moe := &MoE{NormTopK: orBool(r.NormTopK, true), SparseStep: 1}
	rt := &Router{ScalingFactor: 1, LayerFreq: 1}
	if r.ScalingFactor != nil {
		rt.ScalingFactor = *r.ScalingFactor
		if !positive(rt.ScalingFactor) {
			return bad("routed_scaling_factor %v is not positive", rt.ScalingFactor)
		}
	}
	for _, f := range []struct {
		name   string
		v      *int64
		dst    *int
		def    int64
		lo, hi int64
	}{
		{"n_routed_experts", r.RoutedExperts, &moe.Experts, 0, 1, maxExperts},
		{"num_experts_per_tok", r.TopK, &moe.TopK, 1, 1, maxExperts},
		{"moe_intermediate_size", r.MoEIntermediate, &moe.Intermediate, 1, 1, maxIntermediate},
		{"n_shared_experts", r.SharedExperts, &rt.SharedExperts, 1, 0, maxExperts},
		{"n_group", r.Groups, &rt.Groups, 1, 1, maxExperts},
		{"topk_group", r.TopKGroups, &rt.TopKGroups, 1, 1, maxExperts},
		{"first_k_dense_replace", r.FirstDense, &rt.FirstDense, 0, 0, maxLayers},
	} {
		x := f.def
		if f.v != nil {
			x = *f.v
		}
		if x < f.lo || x > f.hi {
			return bad("%s %d out of range [%d, %d]", f.name, x, f.lo, f.hi)
		}
		*f.dst = int(x)
	}
	return c.checkRouter(moe, rt)
}
