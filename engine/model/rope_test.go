package model

import (
	"math"
	"testing"

	"fusion/engine/modelfile"
)

// newRoPE's parameters, checked against values worked out from mlx-lm's
// rope_utils.py by hand (the full rotations are checked against mlx-lm by
// the parity tests).
func TestNewRoPE(t *testing.T) {
	const hd = 64
	for _, tc := range []struct {
		name    string
		scaling *modelfile.RopeScaling
		scale   float32
		mscale  float32
		// period i → want (nil Freqs when checks is empty)
		checks map[int]float64
	}{
		{"default", nil, 1, 0, nil},
		{"linear", &modelfile.RopeScaling{Type: "linear", Factor: 4}, 0.25, 0, nil},
		{"llama3", &modelfile.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
			1, 0, map[int]float64{
				0:  1,                                                      // wavelength 2π: high frequency, kept
				31: 8 * math.Pow(500000, 62.0/64),                          // beyond old/low: stretched by factor
				16: llama3Smooth(math.Pow(500000, 32.0/64), 8, 1, 4, 8192), // wavelength 4443: blended
			}},
		{"yarn", &modelfile.RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, Mscale: 1},
			1, float32(0.1*math.Log(4) + 1), map[int]float64{
				0:  1,                             // below the ramp: extrapolated
				31: 4 * math.Pow(500000, 62.0/64), // past the ramp: interpolated
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &modelfile.Config{RopeTheta: 500000, RopeScaling: tc.scaling}
			r, err := newRoPE(c, hd, false)
			if err != nil {
				t.Fatal(err)
			}
			if r.HeadDim != hd || r.Dims != hd || r.Base != 500000 || r.Scale != tc.scale || r.InputScale != tc.mscale {
				t.Errorf("RoPE %+v", r)
			}
			if (r.Freqs == nil) != (tc.checks == nil) {
				t.Fatalf("Freqs %v, want periods: %v", r.Freqs, tc.checks != nil)
			}
			for i, want := range tc.checks {
				if got := float64(r.Freqs[i]); math.Abs(got-want) > 1e-5*want {
					t.Errorf("period %d = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func llama3Smooth(f, factor, low, high, old float64) float64 {
	s := (old/(2*math.Pi*f) - low) / (high - low)
	return f / ((1-s)/factor + s)
}
