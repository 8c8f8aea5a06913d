package modelfile

import (
	"encoding/json"
	"fmt"
)

// ArchQwen3Next is Qwen3-Next (mlx-lm's qwen3_next): Gated DeltaNet
// linear-attention layers interleaved with gated full attention, and a
// mixture of experts with a gated shared expert.
const ArchQwen3Next = "qwen3_next"

// DeltaNet is the linear-attention part of a hybrid config (qwen3_next):
// every layer l with (l+1) % FullAttentionInterval ≠ 0 is a Gated DeltaNet
// layer of KeyHeads heads of KeyDim features for q and k and ValueHeads
// heads of ValueDim for v, after a causal depthwise convolution of
// ConvKernel taps; the others are full attention.
type DeltaNet struct {
	KeyHeads              int `json:"linear_num_key_heads"`
	ValueHeads            int `json:"linear_num_value_heads"`
	KeyDim                int `json:"linear_key_head_dim"`
	ValueDim              int `json:"linear_value_head_dim"`
	ConvKernel            int `json:"linear_conv_kernel_dim"`
	FullAttentionInterval int `json:"full_attention_interval"`
	// SharedExpert is the width of the sparse layers' shared expert
	// (shared_expert_intermediate_size; qwen3_next).
	SharedExpert int `json:"shared_expert_intermediate_size,omitempty"`
}

// Linear reports whether layer l is a Gated DeltaNet layer.
func (d *DeltaNet) Linear(l int) bool { return d != nil && (l+1)%d.FullAttentionInterval != 0 }

// ConvDim is the width of the convolved q, k, v rows.
func (d *DeltaNet) ConvDim() int { return 2*d.KeyHeads*d.KeyDim + d.ValueHeads*d.ValueDim }

// StateFloats is the float32 values of one sequence's recurrent state in
// one DeltaNet layer: the per-head [ValueDim, KeyDim] matrices and the
// last ConvKernel−1 convolution inputs.
func (d *DeltaNet) StateFloats() int {
	return d.ValueHeads*d.ValueDim*d.KeyDim + (d.ConvKernel-1)*d.ConvDim()
}

// qwen3Next reads qwen3_next's keys as mlx-lm's ModelArgs has them (all
// required but full_attention_interval, default 4): the DeltaNet shape,
// the mixture (Qwen3-MoE's keys) and its shared expert, partial_rotary_factor.
func (c *Config) qwen3Next(data []byte, r *rawConfig) error {
	var raw struct {
		KeyHeads     *int64   `json:"linear_num_key_heads"`
		ValueHeads   *int64   `json:"linear_num_value_heads"`
		KeyDim       *int64   `json:"linear_key_head_dim"`
		ValueDim     *int64   `json:"linear_value_head_dim"`
		ConvKernel   *int64   `json:"linear_conv_kernel_dim"`
		Interval     *int64   `json:"full_attention_interval"`
		SharedExpert *int64   `json:"shared_expert_intermediate_size"`
		HeadDim      *int64   `json:"head_dim"`
		Partial      *float64 `json:"partial_rotary_factor"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, c.Architecture, fmt.Sprintf(format, args...))
	}
	four := int64(4)
	if raw.Interval == nil {
		raw.Interval = &four
	}
	d := &DeltaNet{}
	for _, f := range []struct {
		name string
		v    *int64
		dst  *int
		max  int64
	}{
		{"linear_num_key_heads", raw.KeyHeads, &d.KeyHeads, maxHeads},
		{"linear_num_value_heads", raw.ValueHeads, &d.ValueHeads, maxHeads},
		{"linear_key_head_dim", raw.KeyDim, &d.KeyDim, maxHeadDim},
		{"linear_value_head_dim", raw.ValueDim, &d.ValueDim, maxHeadDim},
		{"linear_conv_kernel_dim", raw.ConvKernel, &d.ConvKernel, 64},
		{"full_attention_interval", raw.Interval, &d.FullAttentionInterval, maxLayers},
		{"head_dim", raw.HeadDim, new(int), maxHeadDim},
	} {
		if f.v == nil {
			return bad("missing %s", f.name)
		}
		if *f.v <= 0 || *f.v > f.max {
			return bad("%s %d out of range [1, %d]", f.name, *f.v, f.max)
		}
		*f.dst = int(*f.v)
	}
	if d.ValueHeads%d.KeyHeads != 0 {
		return bad("linear_num_key_heads %d does not divide linear_num_value_heads %d", d.KeyHeads, d.ValueHeads)
	}
	if d.ConvKernel < 2 {
		return bad("linear_conv_kernel_dim %d (want ≥ 2)", d.ConvKernel)
	}
	moe, err := r.rawMoE.parse(c.NumHiddenLayers)
	if err != nil {
		return err
	}
	if moe.Experts > 0 {
		if raw.SharedExpert == nil || *raw.SharedExpert <= 0 || *raw.SharedExpert > maxIntermediate {
			return bad("shared_expert_intermediate_size missing or out of range")
		}
		d.SharedExpert = int(*raw.SharedExpert)
		c.MoE = moe
	}
	if raw.Partial == nil {
		return bad("missing partial_rotary_factor")
	}
	if !positive(*raw.Partial) || *raw.Partial > 1 {
		return bad("partial_rotary_factor %v out of range (0, 1]", *raw.Partial)
	}
	c.PartialRotaryFactor = *raw.Partial
	if dims := c.RotaryDims(); dims <= 0 || dims%2 != 0 {
		return bad("partial_rotary_factor %v rotates %d of %d features (want an even number > 0)", c.PartialRotaryFactor, dims, c.HeadDim)
	}
	c.DeltaNet = d
	return nil
}
