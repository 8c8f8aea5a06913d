package rnnoise

import (
	"context"
	"fmt"
	"math"
)

// Denoiser is one stream through RNNoise: rnnoise_process_frame's state
// (the signal processing's and the network's).
type Denoiser struct {
	m            *Model
	a            analysis
	net          *State
	synthesisMem [FrameSize]float32
	lastG        [Bands]float32
	delayed      frameFeatures // the previous frame's X, P, Ex, Ep, Exp
}

// NewDenoiser starts a stream, as rnnoise_create does.
func (m *Model) NewDenoiser() *Denoiser {
	d := newDenoiser(m.tables)
	d.m = m
	return d
}

func newDenoiser(t *tables) *Denoiser {
	return &Denoiser{a: analysis{t: t}, net: NewState()}
}

// Process denoises whole frames of 48 kHz mono samples in 16-bit range
// (±32768), frame after frame as rnnoise_process_frame does: the output
// lags the input by one frame (FrameSize samples). It returns the output
// and each frame's voice probability (0 for frames the reference treats as
// silent). Frames run through the network in batches of framesPerStep.
func (d *Denoiser) Process(ctx context.Context, in []float32) (out, vad []float32, err error) {
	return d.process(ctx, in, func(feats []float32) ([]float32, []float32, error) { return d.m.Run(ctx, d.net, feats) })
}

// process is Process with the network as a function of the non-silent
// frames' features (the tests put the reference's gains there).
func (d *Denoiser) process(ctx context.Context, in []float32, run func(feats []float32) (gains, vad []float32, err error)) (out, vad []float32, err error) {
	if len(in)%FrameSize != 0 {
		return nil, nil, fmt.Errorf("rnnoise: %d samples are not whole frames of %d", len(in), FrameSize)
	}
	n := len(in) / FrameSize
	out = make([]float32, 0, len(in))
	vad = make([]float32, 0, n)
	frames := make([]frameFeatures, min(n, framesPerStep))
	for lo := 0; lo < n; lo += framesPerStep {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		hi := min(n, lo+framesPerStep)
		fs := frames[:hi-lo]
		var feats []float32
		var x [FrameSize]float32
		for i := range fs {
			biquad(x[:], &d.a.memHP, in[(lo+i)*FrameSize:(lo+i+1)*FrameSize], hpB, hpA)
			d.a.compute(&fs[i], x[:])
			if !fs[i].silent {
				feats = append(feats, fs[i].features[:]...)
			}
		}
		gains, probs, err := run(feats)
		if err != nil {
			return nil, nil, err
		}
		k := 0
		for i := range fs {
			var y [FrameSize]float32
			p := float32(0)
			if !fs[i].silent {
				p = probs[k]
				d.applyGains((*[Bands]float32)(gains[k*Bands:(k+1)*Bands]), &fs[i])
				k++
			}
			d.synthesize(y[:])
			d.delayed = fs[i]
			out = append(out, y[:]...)
			vad = append(vad, p)
		}
	}
	return out, vad, nil
}

// applyGains is rnnoise_process_frame's treatment of the delayed frame
// with this frame's gains g: the pitch filter, the gains' decay capped at
// 0.6 per frame, and the gains spread over the bins.
func (d *Denoiser) applyGains(g *[Bands]float32, cur *frameFeatures) {
	dl := &d.delayed
	pitchFilter(&dl.X, &dl.P, &dl.Ex, &dl.Ep, &dl.Exp, g)
	for i := range Bands {
		const alpha = float32(.6)
		g[i] = max(g[i], alpha*d.lastG[i])
		d.lastG[i] = float32(min(1, float64(g[i])*(float64(dl.Ex[i])+1e-3)/(float64(cur.Ex[i])+1e-3)))
	}
	var gf [freqSize]float32
	interpBandGain(&gf, g)
	for i := range freqSize {
		dl.X.re[i] *= gf[i]
		dl.X.im[i] *= gf[i]
	}
}

// synthesize is frame_synthesis of the delayed frame: inverse transform,
// window, overlap-add.
func (d *Denoiser) synthesize(out []float32) {
	var x [windowSize]float32
	d.a.t.inverse(x[:], &d.delayed.X)
	d.a.t.applyWindow(x[:])
	for i := range FrameSize {
		out[i] = x[i] + d.synthesisMem[i]
	}
	copy(d.synthesisMem[:], x[FrameSize:])
}

// pitchFilter is rnn_pitch_filter: it adds the pitch-period spectrum P to
// X per band by how much more the band correlates with it than the gain
// keeps, then restores each band's energy.
func pitchFilter(X, P *spectrum, Ex, Ep, Exp, g *[Bands]float32) {
	var r, newE, norm [Bands]float32
	var rf, normf [freqSize]float32
	for i := range Bands {
		if Exp[i] > g[i] {
			r[i] = 1
		} else {
			e2, g2 := Exp[i]*Exp[i], g[i]*g[i]
			r[i] = float32(float64(e2*(1-g2)) / (.001 + float64(g2*(1-e2))))
		}
		r[i] = float32(math.Sqrt(float64(min(1, max(0, r[i])))))
		r[i] = float32(float64(r[i]) * math.Sqrt(float64(Ex[i])/(1e-8+float64(Ep[i]))))
	}
	interpBandGain(&rf, &r)
	for i := range freqSize {
		X.re[i] += rf[i] * P.re[i]
		X.im[i] += rf[i] * P.im[i]
	}
	bandEnergy(&newE, X)
	for i := range Bands {
		norm[i] = float32(math.Sqrt(float64(Ex[i]) / (1e-8 + float64(newE[i]))))
	}
	interpBandGain(&normf, &norm)
	for i := range freqSize {
		X.re[i] *= normf[i]
		X.im[i] *= normf[i]
	}
}

// Denoise runs a whole clip of 48 kHz mono samples in [−1, 1] through a
// new stream and returns the denoised clip, aligned with the input (the
// frame of delay removed) and of the same length, and the voice
// probability of each 10 ms frame.
func (m *Model) Denoise(ctx context.Context, x []float32) (y, vad []float32, err error) {
	frames := (len(x)+FrameSize-1)/FrameSize + 1 // one more to flush the delay
	in := make([]float32, frames*FrameSize)
	for i, v := range x {
		in[i] = v * 32768
	}
	out, vad, err := m.NewDenoiser().Process(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	y = out[FrameSize : FrameSize+len(x)]
	for i := range y {
		y[i] /= 32768
	}
	return y, vad[:frames-1], nil
}
