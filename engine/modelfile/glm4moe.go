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
		rawRouter
		HeadDim       *int64   `json:"head_dim"`
		PartialRotary *float64 `json:"partial_rotary_factor"`
		UseQKNorm     *bool    `json:"use_qk_norm"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: glm4_moe: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if err := r.common(c); err != nil {
		return err
	}
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
	r.LayerFreq = nil // glm4_moe has none: every layer from first_k_dense_replace on
	return r.router(c, 1, 1)
}
