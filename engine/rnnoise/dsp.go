package rnnoise

import "math"

// The signal processing's fixed sizes (RNNoise's denoise.h).
const (
	// SampleRate is the rate RNNoise works at.
	SampleRate = 48000
	// FrameSize is one frame (10 ms), the hop of the analysis.
	FrameSize      = 480
	windowSize     = 2 * FrameSize
	freqSize       = FrameSize + 1
	pitchMinPeriod = 60
	pitchMaxPeriod = 768
	pitchFrameSize = 960
	pitchBufSize   = pitchMaxPeriod + pitchFrameSize
)

// eband20ms are the band edges in bins of 100 Hz (denoise.c).
var eband20ms = [Bands + 2]int{0, 2, 4, 6, 8, 10, 12, 15, 18, 21, 24, 28, 32, 36, 41, 47, 53, 60, 68, 77, 87, 98, 110, 124, 140, 157, 176, 198, 223, 251, 282, 317, 356, 400}

// tables are the constants dump_rnnoise_tables.c computes.
type tables struct {
	halfWindow [FrameSize]float32
	dct        [Bands * Bands]float32
	fft        *fft
}

func newTables() *tables {
	t := &tables{fft: newFFT(windowSize)}
	for i := range t.halfWindow {
		s := math.Sin(.5 * math.Pi * (float64(i) + .5) / FrameSize)
		t.halfWindow[i] = float32(math.Sin(.5 * math.Pi * s * s))
	}
	for i := range Bands {
		for j := range Bands {
			v := math.Cos((float64(i) + .5) * float64(j) * math.Pi / Bands)
			if j == 0 {
				v *= math.Sqrt(.5)
			}
			t.dct[i*Bands+j] = float32(v)
		}
	}
	return t
}

// spectrum is the first freqSize bins of a window's transform.
type spectrum struct{ re, im [freqSize]float32 }

func (t *tables) applyWindow(x []float32) {
	for i := range FrameSize {
		x[i] *= t.halfWindow[i]
		x[windowSize-1-i] *= t.halfWindow[i]
	}
}

// forward is kiss_fft's forward transform scaled by 1/960, first half.
func (t *tables) forward(out *spectrum, in []float32) {
	var x, y [windowSize]complex128
	for i, v := range in[:windowSize] {
		x[i] = complex(float64(v), 0)
	}
	t.fft.forward(y[:], x[:])
	for i := range freqSize {
		out.re[i] = float32(real(y[i]) / windowSize)
		out.im[i] = float32(imag(y[i]) / windowSize)
	}
}

// inverse is denoise.c's inverse_transform: the real signal whose
// spectrum's first half is in, unscaled.
func (t *tables) inverse(out []float32, in *spectrum) {
	var x, y [windowSize]complex128
	for i := range freqSize {
		x[i] = complex(float64(in.re[i]), float64(in.im[i]))
	}
	for i := freqSize; i < windowSize; i++ {
		x[i] = complex(float64(in.re[windowSize-i]), -float64(in.im[windowSize-i]))
	}
	t.fft.inverse(y[:], x[:])
	for i := range out[:windowSize] {
		out[i] = float32(real(y[i]))
	}
}

// bandSums spreads per-bin values v(i) over the bands with triangular
// weights, as compute_band_energy and compute_band_corr do.
func bandSums(out *[Bands]float32, v func(i int) float32) {
	var sum [Bands + 2]float32
	for i := range Bands + 1 {
		size := eband20ms[i+1] - eband20ms[i]
		for j := range size {
			frac := float32(j) / float32(size)
			tmp := v(eband20ms[i] + j)
			sum[i] += (1 - frac) * tmp
			sum[i+1] += frac * tmp
		}
	}
	sum[1] = (sum[0] + sum[1]) * 2 / 3
	sum[Bands] = (sum[Bands] + sum[Bands+1]) * 2 / 3
	copy(out[:], sum[1:Bands+1])
}

func bandEnergy(out *[Bands]float32, X *spectrum) {
	bandSums(out, func(i int) float32 { return X.re[i]*X.re[i] + X.im[i]*X.im[i] })
}

func bandCorr(out *[Bands]float32, X, P *spectrum) {
	bandSums(out, func(i int) float32 { return X.re[i]*P.re[i] + X.im[i]*P.im[i] })
}

// interpBandGain spreads per-band values over the bins.
func interpBandGain(g *[freqSize]float32, bandE *[Bands]float32) {
	for i := 1; i < Bands; i++ {
		size := eband20ms[i+1] - eband20ms[i]
		for j := range size {
			frac := float32(j) / float32(size)
			g[eband20ms[i]+j] = (1-frac)*bandE[i-1] + frac*bandE[i]
		}
	}
	for j := range eband20ms[1] {
		g[j] = bandE[0]
	}
	for j := eband20ms[Bands]; j < eband20ms[Bands+1]; j++ {
		g[j] = bandE[Bands-1]
	}
}

func (t *tables) dctOf(out []float32, in *[Bands]float32) {
	for i := range Bands {
		var sum float32
		for j := range Bands {
			sum += in[j] * t.dct[j*Bands+i]
		}
		out[i] = float32(float64(sum) * math.Sqrt(2./22))
	}
}

// biquad is rnn_biquad (the input's high-pass filter), its feedback in
// float64 as the reference computes it.
func biquad(y []float32, mem *[2]float32, x []float32, b, a [2]float32) {
	for i, xi := range x {
		yi := xi + mem[0]
		mem[0] = float32(float64(mem[1]) + (float64(b[0])*float64(xi) - float64(a[0])*float64(yi)))
		mem[1] = float32(float64(b[1])*float64(xi) - float64(a[1])*float64(yi))
		y[i] = yi
	}
}

var (
	hpB = [2]float32{-2, 1}
	hpA = [2]float32{-1.99599, 0.99600}
)
