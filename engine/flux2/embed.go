package flux2

import "math"

// RoPETables returns the cosines and sines FLUX.2's 4-axis rotary
// embedding rotates each token's heads by (diffusers' Flux2PosEmbed): the
// head's features are split into one run per axis (axes[a] features for
// axis a of PosID: T, H, W, L); pair i of axis a turns by
// pos_a · theta^(−2i/axes[a]), computed in float64, and both members of
// the pair share the angle (repeat_interleave). Row r of each [len(ids),
// Σaxes] table belongs to token r.
func RoPETables(ids []PosID, axes []int, theta float64) (cos, sin []float32) {
	width := 0
	for _, d := range axes {
		width += d
	}
	cos = make([]float32, len(ids)*width)
	sin = make([]float32, len(ids)*width)
	for r, id := range ids {
		pos := [4]float64{float64(id.T), float64(id.H), float64(id.W), float64(id.L)}
		off := r * width
		for a, d := range axes {
			for i := 0; i < d/2; i++ {
				freq := 1 / math.Pow(theta, float64(2*i)/float64(d))
				angle := pos[a%4] * freq
				c, s := float32(math.Cos(angle)), float32(math.Sin(angle))
				cos[off+2*i], cos[off+2*i+1] = c, c
				sin[off+2*i], sin[off+2*i+1] = s, s
			}
			off += d
		}
	}
	return cos, sin
}

// ModelTimestep is the timestep the transformer embeds for scheduler
// timestep t: the pipeline passes t/1000 and the model multiplies it by
// 1000 again, both in float32, which need not give t back exactly.
func ModelTimestep(t float32) float32 {
	return float32(t/1000) * 1000
}

// TimestepEmbedding is diffusers' sinusoidal timestep projection as
// FLUX.2 configures it (Timesteps with flip_sin_to_cos, no frequency
// shift): channels/2 cosines, then as many sines, of t·e^(−ln(10000)·i/half),
// in float32. channels must be even.
func TimestepEmbedding(t float32, channels int) []float32 {
	half := channels / 2
	out := make([]float32, channels)
	for i := 0; i < half; i++ {
		exponent := float32(-math.Log(10000)) * float32(i) / float32(half)
		freq := float32(math.Exp(float64(exponent)))
		arg := t * freq
		out[i] = float32(math.Cos(float64(arg)))
		out[half+i] = float32(math.Sin(float64(arg)))
	}
	return out
}
