package rnnoise

import "math"

// analysis is the state of RNNoise's signal processing for one stream
// (denoise.c's DenoiseState without the network).
type analysis struct {
	t           *tables
	analysisMem [FrameSize]float32
	pitchBuf    [pitchBufSize]float32
	lastGain    float32
	lastPeriod  int
	memHP       [2]float32
}

// frameFeatures is what compute_frame_features leaves for one frame.
type frameFeatures struct {
	X, P        spectrum
	Ex, Ep, Exp [Bands]float32
	features    [Features]float32
	silent      bool
}

// frame is rnn_frame_analysis: the windowed transform of the previous
// frame and this one, and its band energies.
func (a *analysis) frame(X *spectrum, Ex *[Bands]float32, in []float32) {
	var x [windowSize]float32
	copy(x[:], a.analysisMem[:])
	copy(x[FrameSize:], in)
	copy(a.analysisMem[:], in)
	a.t.applyWindow(x[:])
	a.t.forward(X, x[:])
	bandEnergy(Ex, X)
}

// compute is rnn_compute_frame_features on one high-passed frame in (16-bit
// range).
func (a *analysis) compute(f *frameFeatures, in []float32) {
	a.frame(&f.X, &f.Ex, in)
	copy(a.pitchBuf[:], a.pitchBuf[FrameSize:])
	copy(a.pitchBuf[pitchBufSize-FrameSize:], in)
	var lp [pitchBufSize >> 1]float32
	pitchDownsample(a.pitchBuf[:], lp[:], pitchBufSize)
	idx := pitchSearch(lp[pitchMaxPeriod>>1:], lp[:], pitchFrameSize, pitchMaxPeriod-3*pitchMinPeriod)
	idx = pitchMaxPeriod - idx
	gain, idx := removeDoubling(lp[:], pitchMaxPeriod, pitchMinPeriod, pitchFrameSize, idx, a.lastPeriod, a.lastGain)
	a.lastPeriod, a.lastGain = idx, gain
	var p [windowSize]float32
	copy(p[:], a.pitchBuf[pitchBufSize-windowSize-idx:])
	a.t.applyWindow(p[:])
	a.t.forward(&f.P, p[:])
	bandEnergy(&f.Ep, &f.P)
	bandCorr(&f.Exp, &f.X, &f.P)
	for i := range Bands {
		f.Exp[i] = float32(float64(f.Exp[i]) / math.Sqrt(.001+float64(f.Ex[i]*f.Ep[i])))
	}
	feat := f.features[:]
	a.t.dctOf(feat[Bands:], &f.Exp)
	feat[2*Bands] = float32(.01 * float64(idx-300))
	var ly [Bands]float32
	logMax, follow := float32(-2), float32(-2)
	var e float32
	for i := range Bands {
		v := float32(math.Log10(1e-2 + float64(f.Ex[i])))
		v = float32(max(float64(logMax-7), max(float64(follow)-1.5, float64(v))))
		ly[i] = v
		logMax = max(logMax, v)
		follow = float32(max(float64(follow)-1.5, float64(v)))
		e += f.Ex[i]
	}
	if float64(e) < 0.04 {
		clear(feat)
		f.silent = true
		return
	}
	f.silent = false
	a.t.dctOf(feat[:Bands], &ly)
	feat[0] -= 12
	feat[1] -= 4
}
