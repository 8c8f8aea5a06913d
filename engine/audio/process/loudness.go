package process

import (
	"fmt"
	"math"

	"fusion/engine/audio"
)

// Loudness is the integrated loudness of s in LUFS per ITU-R BS.1770-4,
// as pyloudnorm's Meter measures it: each channel K-weighted (a high
// shelf of +4 dB at 1.5 kHz, then a high-pass at 38 Hz, biquads designed
// for s.Rate), mean squares over 400-ms blocks every 100 ms, blocks gated
// at −70 LUFS and then 10 LU below the gated mean; channels weighted 1
// (1.41 for the 4th and 5th, the surrounds). −Inf for silence. It needs
// at least one block of audio and at most 5 channels.
func Loudness(s audio.Signal) (float64, error) {
	const block, step = 0.4, 0.25 // seconds; overlap 75%
	ch, n := s.Channels, s.Frames()
	if ch > 5 {
		return 0, fmt.Errorf("%w: loudness of %d channels (at most 5)", ErrParams, ch)
	}
	if float64(n) < block*float64(s.Rate) {
		return 0, fmt.Errorf("%w: loudness needs at least 0.4 s of audio, got %.3f s", ErrParams, float64(n)/float64(s.Rate))
	}
	shelf := biquadShelf(4, 1/math.Sqrt2, 1500, float64(s.Rate))
	pass := biquadHighPass(0.5, 38, float64(s.Rate))
	filtered := make([][]float64, ch)
	for c := range ch {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(s.Samples[i*ch+c])
		}
		filtered[c] = pass.apply(shelf.apply(x))
	}
	rate := float64(s.Rate)
	T := float64(n) / rate
	blocks := int(math.RoundToEven((T-block)/(block*step))) + 1
	gains := []float64{1, 1, 1, 1.41, 1.41}
	z := make([][]float64, ch)
	for c := range ch {
		z[c] = make([]float64, blocks)
		for j := range blocks {
			l := int(block * (float64(j) * step) * rate)
			u := min(n, int(block*(float64(j)*step+1)*rate))
			var sum float64
			for _, v := range filtered[c][l:u] {
				sum += v * v
			}
			z[c][j] = sum / (block * rate)
		}
	}
	loud := func(ms []float64) float64 {
		var sum float64
		for c, v := range ms {
			sum += gains[c] * v
		}
		return -0.691 + 10*math.Log10(sum)
	}
	blockLoudness := make([]float64, blocks)
	for j := range blocks {
		ms := make([]float64, ch)
		for c := range ch {
			ms[c] = z[c][j]
		}
		blockLoudness[j] = loud(ms)
	}
	gatedMean := func(keep func(float64) bool) []float64 {
		ms := make([]float64, ch)
		count := 0
		for j, l := range blockLoudness {
			if keep(l) {
				count++
				for c := range ch {
					ms[c] += z[c][j]
				}
			}
		}
		for c := range ms {
			if count == 0 {
				ms[c] = 0
			} else {
				ms[c] /= float64(count)
			}
		}
		return ms
	}
	const absolute = -70.0
	relative := loud(gatedMean(func(l float64) bool { return l >= absolute })) - 10
	return loud(gatedMean(func(l float64) bool { return l > relative && l > absolute })), nil
}

// biquad is a second-order IIR filter, coefficients normalized by a0.
type biquad struct{ b0, b1, b2, a1, a2 float64 }

// apply filters x (direct form II transposed, zero initial state).
func (f biquad) apply(x []float64) []float64 {
	y := make([]float64, len(x))
	var z1, z2 float64
	for i, v := range x {
		out := f.b0*v + z1
		z1 = f.b1*v - f.a1*out + z2
		z2 = f.b2*v - f.a2*out
		y[i] = out
	}
	return y
}

// biquadShelf is the RBJ high shelf of gainDB at fc.
func biquadShelf(gainDB, q, fc, rate float64) biquad {
	A := math.Pow(10, gainDB/40)
	w0 := 2 * math.Pi * fc / rate
	alpha := math.Sin(w0) / (2 * q)
	cw, sa := math.Cos(w0), 2*math.Sqrt(A)*alpha
	a0 := (A + 1) - (A-1)*cw + sa
	return biquad{
		b0: A * ((A + 1) + (A-1)*cw + sa) / a0,
		b1: -2 * A * ((A - 1) + (A+1)*cw) / a0,
		b2: A * ((A + 1) + (A-1)*cw - sa) / a0,
		a1: 2 * ((A - 1) - (A+1)*cw) / a0,
		a2: ((A + 1) - (A-1)*cw - sa) / a0,
	}
}

// biquadHighPass is the RBJ high-pass at fc.
func biquadHighPass(q, fc, rate float64) biquad {
	w0 := 2 * math.Pi * fc / rate
	alpha := math.Sin(w0) / (2 * q)
	cw := math.Cos(w0)
	a0 := 1 + alpha
	return biquad{b0: (1 + cw) / 2 / a0, b1: -(1 + cw) / a0, b2: (1 + cw) / 2 / a0, a1: -2 * cw / a0, a2: (1 - alpha) / a0}
}
