package modelfile

import (
	"encoding/json"
	"fmt"
)

// ArchQwen3Next is Qwen3-Next (mlx-lm's qwen3_next): Gated DeltaNet
// linear-attention layers interleaved with gated full attention, and a
// mixture of experts with a gated shared expert.
const ArchQwen3Next = "qwen3_next"

// ArchQwen35 and ArchQwen35MoE are Qwen3.5/3.6 (mlx-lm's qwen3_5 and
// qwen3_5_moe): Qwen3-Next's layers with unfused DeltaNet projections, the
// text model's config in text_config and its weights under
// "language_model."; every layer a mixture (qwen3_5_moe) or a dense MLP.
const (
	ArchQwen35    = "qwen3_5"
	ArchQwen35MoE = "qwen3_5_moe"
)

// qwen35Prefix is where mlx-lm keeps Qwen3.5's text model (its sanitize
// moves every weight there, text-only checkpoints too).
const qwen35Prefix = "language_model."

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
	// (shared_expert_intermediate_size).
	SharedExpert int `json:"shared_expert_intermediate_size,omitempty"`
	// Unfused: q, k, v, z, b and a come from in_proj_qkv, in_proj_z,
	// in_proj_b and in_proj_a (qwen3_5) rather than in_proj_qkvz and
	// in_proj_ba grouped by key head (qwen3_next).
	Unfused bool `json:"unfused,omitempty"`
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
	qwen35 := c.Architecture != ArchQwen3Next
	if qwen35 && raw.HeadDim == nil {
		raw.HeadDim = new(int64)
		*raw.HeadDim = int64(c.HeadDim) // hidden/heads, as mlx-lm defaults it
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
	var moe *MoE
	var err error
	if qwen35 {
		// mlx-lm's qwen3_5: a mixture in every layer when num_experts > 0
		// (no decoder_sparse_step or mlp_only_layers), norm_topk_prob
		// true unless said.
		moe = &MoE{SparseStep: 1, NormTopK: orBool(r.NormTopKProb, true)}
		if n := r.NumExperts; n != nil && *n > 0 {
			r.DecoderSparseStep, r.MLPOnlyLayers = nil, nil
			one := int64(1)
			r.DecoderSparseStep = &one
			if moe, err = r.rawMoE.parse(c.NumHiddenLayers); err != nil {
				return err
			}
			moe.NormTopK = orBool(r.NormTopKProb, true)
		}
	} else if moe, err = r.rawMoE.parse(c.NumHiddenLayers); err != nil {
		return err
	}
	if moe.Experts > 0 {
		if raw.SharedExpert == nil || *raw.SharedExpert <= 0 || *raw.SharedExpert > maxIntermediate {
			return bad("shared_expert_intermediate_size missing or out of range")
		}
		d.SharedExpert = int(*raw.SharedExpert)
		c.MoE = moe
	}
	if qwen35 {
		// Its RoPE is rope_parameters' (partial 0.25, theta 100000 unless
		// given; the multimodal sections do not touch text positions).
		var rp struct {
			RopeParameters *struct {
				Partial *float64 `json:"partial_rotary_factor"`
				Theta   *float64 `json:"rope_theta"`
			} `json:"rope_parameters"`
		}
		if err := json.Unmarshal(data, &rp); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		quarter, theta := 0.25, 100000.0
		raw.Partial = &quarter
		if p := rp.RopeParameters; p != nil {
			if p.Partial != nil {
				raw.Partial = p.Partial
			}
			if p.Theta != nil {
				theta = *p.Theta
			}
		}
		if !positive(theta) {
			return bad("rope_theta %v must be positive", theta)
		}
		c.RopeTheta, c.RopeScaling = theta, nil
		d.Unfused = true
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

// qwen35Config returns the text model's config of a Qwen3.5 config
// (model_type qwen3_5 or qwen3_5_moe), as mlx-lm reads it: text_config
// when there is one (else the config itself), run as the outer
// model_type, with the top level's quantization and dtype; false for any
// other config.
func qwen35Config(data []byte) (*Config, bool, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var mt string
	if raw, ok := top["model_type"]; ok {
		_ = json.Unmarshal(raw, &mt)
	}
	if mt != ArchQwen35 && mt != ArchQwen35MoE {
		return nil, false, nil
	}
	tc := top
	if raw, ok := top["text_config"]; ok && !isNull(raw) {
		tc = nil
		if err := json.Unmarshal(raw, &tc); err != nil || tc == nil {
			return nil, true, fmt.Errorf("%w: %s: text_config is not an object", ErrInvalidConfig, mt)
		}
		for _, k := range []string{"quantization", "quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"} {
			if v, ok := top[k]; ok {
				if _, set := tc[k]; !set || k == "quantization" || k == "quantization_config" {
					tc[k] = v
				}
			}
		}
	}
	tc["model_type"] = json.RawMessage(`"` + mt + `"`)
	delete(tc, "architectures")
	delete(tc, "text_config")
	if _, ok := tc["tie_word_embeddings"]; !ok {
		tc["tie_word_embeddings"] = json.RawMessage("false")
	}
	merged, err := json.Marshal(tc)
	if err != nil {
		return nil, true, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	c, err := parseFlat(merged)
	if err != nil {
		return nil, true, fmt.Errorf("%s text_config: %w", mt, err)
	}
	var archs []string
	if raw, ok := top["architectures"]; ok {
		_ = json.Unmarshal(raw, &archs)
	}
	c.Architectures, c.WeightPrefix = archs, qwen35Prefix
	return c, true, nil
}
