package modelfile

import "fmt"

// phi3 applies what mlx-lm's phi3.py reads beyond the common keys:
// partial_rotary_factor (the share of each head RoPE rotates), head_dim
// always hidden_size / num_attention_heads, max_position_embeddings
// defaulting to 131072, and rope_scaling kept only if it is longrope
// ("su") or linear (mlx-lm warns and drops any other type). A longrope
// block's original_max_position_embeddings is the top-level key (default
// 4096) for phi3, the block's own for other families.
func (c *Config) phi3(r *rawConfig) error {
	c.PartialRotaryFactor = 1
	if c.Architecture != ArchPhi3 {
		if s := c.RopeScaling; s != nil && s.Type == RopeLongRope && s.OriginalMaxPositionEmbeddings == 0 {
			return fmt.Errorf("%w: rope_scaling: longrope needs original_max_position_embeddings", ErrInvalidConfig)
		}
		return nil
	}
	if c.HiddenSize%c.NumAttentionHeads != 0 {
		return fmt.Errorf("%w: phi3: num_attention_heads %d does not divide hidden_size %d", ErrInvalidConfig, c.NumAttentionHeads, c.HiddenSize)
	}
	c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	if r.MaxPositionEmbeddings == nil {
		c.MaxPositionEmbeddings = 131072
	}
	if f := r.PartialRotaryFactor; f != nil {
		if !positive(*f) || *f > 1 {
			return fmt.Errorf("%w: phi3: partial_rotary_factor %v out of range (0, 1]", ErrInvalidConfig, *f)
		}
		c.PartialRotaryFactor = *f
	}
	if dims := c.RotaryDims(); dims <= 0 || dims%2 != 0 {
		return fmt.Errorf("%w: phi3: partial_rotary_factor %v rotates %d of %d features (want an even number > 0)",
			ErrInvalidConfig, c.PartialRotaryFactor, dims, c.HeadDim)
	}
	s := c.RopeScaling
	if s == nil {
		return nil
	}
	switch s.Type {
	case RopeLongRope:
		orig := int64(4096)
		if r.OriginalMaxPositions != nil {
			orig = *r.OriginalMaxPositions
		}
		if orig <= 0 || orig > maxPositions {
			return fmt.Errorf("%w: phi3: original_max_position_embeddings %d out of range", ErrInvalidConfig, orig)
		}
		s.OriginalMaxPositionEmbeddings = int(orig)
		if n := len(s.LongFactor); n != c.RotaryDims()/2 {
			return fmt.Errorf("%w: phi3: %d longrope factors for %d rotated features (want %d)", ErrInvalidConfig, n, c.RotaryDims(), c.RotaryDims()/2)
		}
	case RopeLinear:
	default:
		c.RopeScaling = nil
	}
	return nil
}

// RotaryDims is the number of features of each head that RoPE rotates:
// int(head_dim · partial_rotary_factor), as mlx-lm's phi3 computes it.
func (c *Config) RotaryDims() int {
	f := c.PartialRotaryFactor
	if f == 0 {
		f = 1
	}
	return int(float64(c.HeadDim) * f)
}
