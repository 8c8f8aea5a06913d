package modelfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// RoPE scaling types.
const (
	RopeLinear  = "linear"
	RopeDynamic = "dynamic"
	RopeLlama3  = "llama3"
	RopeYarn    = "yarn"
	// RopeLongRope is Phi-3's "longrope" (also spelled "su"): per-frequency
	// factors; see RopeScaling.LongFactor.
	RopeLongRope = "longrope"
)

// RopeScaling is the "rope_scaling" block of config.json, with the
// defaults mlx-lm applies filled in. Only the fields of its Type matter.
type RopeScaling struct {
	Type   string  `json:"type"`
	Factor float64 `json:"factor"`
	// OriginalMaxPositionEmbeddings: llama3 (default 8192), yarn (4096).
	OriginalMaxPositionEmbeddings int `json:"original_max_position_embeddings,omitempty"`
	// llama3: low_freq_factor (1), high_freq_factor (4).
	LowFreqFactor  float64 `json:"low_freq_factor,omitempty"`
	HighFreqFactor float64 `json:"high_freq_factor,omitempty"`
	// yarn: beta_fast (32), beta_slow (1), mscale (1), mscale_all_dim (0),
	// attention_factor (optional; 0 when absent).
	BetaFast        float64 `json:"beta_fast,omitempty"`
	BetaSlow        float64 `json:"beta_slow,omitempty"`
	Mscale          float64 `json:"mscale,omitempty"`
	MscaleAllDim    float64 `json:"mscale_all_dim,omitempty"`
	AttentionFactor float64 `json:"attention_factor,omitempty"`
	// longrope: one factor per rotated frequency for long and short
	// contexts (mlx-lm 0.32.2's SuScaledRoPE uses the long ones at every
	// length), and OriginalMaxPositionEmbeddings (Phi-3 puts it beside
	// rope_scaling; default 4096).
	ShortFactor []float64 `json:"short_factor,omitempty"`
	LongFactor  []float64 `json:"long_factor,omitempty"`
}

type rawRope struct {
	Type            *string   `json:"type"`
	RopeType        *string   `json:"rope_type"`
	RopeTheta       *float64  `json:"rope_theta"` // transformers v5 rope_parameters
	Factor          *float64  `json:"factor"`
	OriginalMax     *int64    `json:"original_max_position_embeddings"`
	LowFreqFactor   *float64  `json:"low_freq_factor"`
	HighFreqFactor  *float64  `json:"high_freq_factor"`
	BetaFast        *float64  `json:"beta_fast"`
	BetaSlow        *float64  `json:"beta_slow"`
	Mscale          *float64  `json:"mscale"`
	MscaleAllDim    *float64  `json:"mscale_all_dim"`
	AttentionFactor *float64  `json:"attention_factor"`
	ShortFactor     []float64 `json:"short_factor"`
	LongFactor      []float64 `json:"long_factor"`
}

// parseRope parses a rope_scaling (or rope_parameters) block. It returns
// nil scaling for null or type "default", and the rope_theta the block
// carries, if any.
func parseRope(field string, b json.RawMessage) (*RopeScaling, *float64, error) {
	if len(b) == 0 || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil, nil, nil
	}
	var r rawRope
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrInvalidConfig, field, err)
	}
	typ := ""
	switch {
	case r.Type != nil && r.RopeType != nil && *r.Type != *r.RopeType:
		return nil, nil, fmt.Errorf("%w: %s: type %q and rope_type %q disagree", ErrInvalidConfig, field, *r.Type, *r.RopeType)
	case r.RopeType != nil:
		typ = *r.RopeType
	case r.Type != nil:
		typ = *r.Type
	}
	if typ == "" || typ == "default" {
		return nil, r.RopeTheta, nil
	}
	if typ == RopeLongRope || typ == "su" {
		s, err := parseLongRope(field, &r)
		return s, r.RopeTheta, err
	}
	s := &RopeScaling{Type: typ}
	if r.Factor == nil {
		return nil, nil, fmt.Errorf("%w: %s: %s scaling needs a factor", ErrInvalidConfig, field, typ)
	}
	s.Factor = *r.Factor
	if !positive(s.Factor) {
		return nil, nil, fmt.Errorf("%w: %s: factor %v must be positive", ErrInvalidConfig, field, s.Factor)
	}
	orig := func(def int64) error {
		v := def
		if r.OriginalMax != nil {
			v = *r.OriginalMax
		}
		if v <= 0 || v > maxPositions {
			return fmt.Errorf("%w: %s: original_max_position_embeddings %d out of range", ErrInvalidConfig, field, v)
		}
		s.OriginalMaxPositionEmbeddings = int(v)
		return nil
	}
	switch typ {
	case RopeLinear, RopeDynamic:
	case RopeLlama3:
		if err := orig(8192); err != nil {
			return nil, nil, err
		}
		s.LowFreqFactor = orDefault(r.LowFreqFactor, 1)
		s.HighFreqFactor = orDefault(r.HighFreqFactor, 4)
		if !positive(s.LowFreqFactor) || !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0) {
			return nil, nil, fmt.Errorf("%w: %s: need 0 < low_freq_factor (%v) < high_freq_factor (%v)", ErrInvalidConfig, field, s.LowFreqFactor, s.HighFreqFactor)
		}
	case RopeYarn:
		if err := orig(4096); err != nil {
			return nil, nil, err
		}
		s.BetaFast = orDefault(r.BetaFast, 32)
		s.BetaSlow = orDefault(r.BetaSlow, 1)
		s.Mscale = orDefault(r.Mscale, 1)
		s.MscaleAllDim = orDefault(r.MscaleAllDim, 0)
		s.AttentionFactor = orDefault(r.AttentionFactor, 0)
		if !positive(s.BetaFast) || !positive(s.BetaSlow) {
			return nil, nil, fmt.Errorf("%w: %s: beta_fast (%v) and beta_slow (%v) must be positive", ErrInvalidConfig, field, s.BetaFast, s.BetaSlow)
		}
		if !finite(s.Mscale) || !finite(s.MscaleAllDim) || s.AttentionFactor < 0 || !finite(s.AttentionFactor) {
			return nil, nil, fmt.Errorf("%w: %s: invalid mscale, mscale_all_dim or attention_factor", ErrInvalidConfig, field)
		}
	default:
		return nil, nil, fmt.Errorf("%w: %s: RoPE scaling type %q", ErrUnsupported, field, typ)
	}
	return s, r.RopeTheta, nil
}

// maxRopeFactors bounds the length of longrope's factor lists (one per
// rotated frequency: at most half the widest head).
const maxRopeFactors = maxHeadDim / 2

// parseLongRope reads a longrope (or "su") block: long_factor and
// short_factor, lists of positive numbers of the same length (that the
// length is the rotated dimensions' half is checked when the model is
// built), and original_max_position_embeddings if the block has it.
func parseLongRope(field string, r *rawRope) (*RopeScaling, error) {
	s := &RopeScaling{Type: RopeLongRope, ShortFactor: r.ShortFactor, LongFactor: r.LongFactor}
	switch {
	case len(s.LongFactor) == 0 || len(s.ShortFactor) == 0:
		return nil, fmt.Errorf("%w: %s: longrope needs long_factor and short_factor", ErrInvalidConfig, field)
	case len(s.LongFactor) != len(s.ShortFactor) || len(s.LongFactor) > maxRopeFactors:
		return nil, fmt.Errorf("%w: %s: %d long and %d short factors (want the same number, at most %d)",
			ErrInvalidConfig, field, len(s.LongFactor), len(s.ShortFactor), maxRopeFactors)
	}
	for _, f := range append(slices.Clone(s.LongFactor), s.ShortFactor...) {
		if !positive(f) {
			return nil, fmt.Errorf("%w: %s: longrope factor %v must be positive", ErrInvalidConfig, field, f)
		}
	}
	if r.OriginalMax != nil {
		if *r.OriginalMax <= 0 || *r.OriginalMax > maxPositions {
			return nil, fmt.Errorf("%w: %s: original_max_position_embeddings %d out of range", ErrInvalidConfig, field, *r.OriginalMax)
		}
		s.OriginalMaxPositionEmbeddings = int(*r.OriginalMax)
	}
	return s, nil
}

func orDefault(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}

func finite(v float64) bool   { return !math.IsNaN(v) && !math.IsInf(v, 0) }
func positive(v float64) bool { return finite(v) && v > 0 }
