package model

import (
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// newRoPE builds the rotary embedding of a config exactly as mlx-lm's
// initialize_rope does (rope_utils.py), in float32 like MLX: default and
// linear scaling pass a base (and a position scale), llama3, yarn and
// longrope pass precomputed periods, yarn and longrope also their mscale
// on the rotated features. It rotates the first
// int(headDim·partial_rotary_factor) features of each head.
func newRoPE(c *modelfile.Config, headDim int, traditional bool) (*backend.RoPE, error) {
	dims := headDim
	if f := c.PartialRotaryFactor; f != 0 && f != 1 {
		dims = int(float64(headDim) * f)
	}
	if dims <= 0 || dims%2 != 0 || dims > headDim {
		return nil, fmt.Errorf("%w: RoPE over %d of %d features", modelfile.ErrInvalidConfig, dims, headDim)
	}
	r := &backend.RoPE{HeadDim: headDim, Dims: dims, Traditional: traditional, Base: c.RopeTheta, Scale: 1}
	s := c.RopeScaling
	if s == nil {
		return r, nil
	}
	switch s.Type {
	case modelfile.RopeLinear:
		r.Scale = float32(1 / s.Factor)
	case modelfile.RopeLlama3:
		r.Freqs = llama3Freqs(c.RopeTheta, dims, s)
	case modelfile.RopeYarn:
		r.Freqs, r.InputScale = yarnFreqs(c.RopeTheta, dims, s)
	case modelfile.RopeLongRope:
		if len(s.LongFactor) != dims/2 {
			return nil, fmt.Errorf("%w: %d longrope factors for %d rotated features", modelfile.ErrInvalidConfig, len(s.LongFactor), dims)
		}
		r.Freqs, r.InputScale = longRopeFreqs(c.RopeTheta, dims, c.MaxPositionEmbeddings, s)
		r.Traditional = false // SuScaledRoPE always rotates halves
	default:
		return nil, fmt.Errorf("%w: RoPE scaling %q", modelfile.ErrUnsupported, s.Type)
	}
	return r, nil
}

// basePeriods is base^(2i/dims) for i < dims/2, in float32.
func basePeriods(base float64, dims int) []float32 {
	f := make([]float32, dims/2)
	for i := range f {
		f[i] = float32(math.Pow(float64(float32(base)), float64(float32(2*i)/float32(dims))))
	}
	return f
}

// llama3Freqs: periods with wavelength 2π·f beyond old/low_freq_factor
// stretched by factor, those below old/high_freq_factor kept, and a
// smooth blend in between.
func llama3Freqs(base float64, dims int, s *modelfile.RopeScaling) []float32 {
	factor := float32(s.Factor)
	low, high := float32(s.LowFreqFactor), float32(s.HighFreqFactor)
	old := float32(s.OriginalMaxPositionEmbeddings)
	lowWavelen, highWavelen := old/low, old/high
	freqs := basePeriods(base, dims)
	for i, f := range freqs {
		wavelen := float32(2*math.Pi) * f
		if wavelen > lowWavelen {
			f *= factor
		}
		if wavelen > highWavelen && wavelen < lowWavelen {
			smooth := (old/wavelen - low) / (high - low)
			f = f / ((1-smooth)/factor + smooth)
		}
		freqs[i] = f
	}
	return freqs
}

// longRopeFreqs is mlx-lm's SuScaledRoPE: periods long_factor_i ·
// base^(2i/dims) (the long factors at every length: mlx-lm 0.32.2 never
// switches to the short ones), and the features scaled by
// √(1 + ln(max/orig)/ln(orig)) when max_position_embeddings exceeds the
// original context (else 1).
func longRopeFreqs(base float64, dims, maxPositions int, s *modelfile.RopeScaling) ([]float32, float32) {
	freqs := basePeriods(base, dims)
	for i := range freqs {
		freqs[i] *= float32(s.LongFactor[i])
	}
	orig := float64(s.OriginalMaxPositionEmbeddings)
	scale := 1.0
	if factor := float64(maxPositions) / orig; factor > 1 {
		scale = math.Sqrt(1 + math.Log(factor)/math.Log(orig))
	}
	return freqs, float32(scale)
}

// yarnFreqs: YaRN's blend of interpolated (factor·f) and extrapolated (f)
// periods over a linear ramp between the correction dims of beta_fast and
// beta_slow, and mscale = g(factor, mscale)/g(factor, mscale_all_dim),
// g(s, m) = 0.1·m·ln s + 1 (1 when s ≤ 1).
func yarnFreqs(base float64, dims int, s *modelfile.RopeScaling) ([]float32, float32) {
	orig := float64(s.OriginalMaxPositionEmbeddings)
	correction := func(rotations float64) float64 {
		return float64(dims) * math.Log(orig/(rotations*2*math.Pi)) / (2 * math.Log(base))
	}
	low := max(math.Floor(correction(s.BetaFast)), 0)
	high := min(math.Ceil(correction(s.BetaSlow)), float64(dims-1))
	if low == high {
		high += 0.001
	}
	g := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	mscale := g(s.Factor, s.Mscale) / g(s.Factor, s.MscaleAllDim)

	factor := float32(s.Factor)
	lo, span := float32(low), float32(high-low)
	freqs := basePeriods(base, dims)
	for i, extra := range freqs {
		ramp := min(max((float32(i)-lo)/span, 0), 1)
		mask := 1 - ramp
		inter := factor * extra
		freqs[i] = (inter * extra) / (inter*mask + extra*(1-mask))
	}
	return freqs, float32(mscale)
}
