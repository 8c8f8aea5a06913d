// Package logmel is Whisper's audio front end: 16 kHz mono samples to the
// log-mel spectrogram the encoder takes. Each frame is 400 samples (25 ms)
// every 160 (10 ms), the signal reflect-padded by 200 at both ends (a
// centred STFT), weighted by a periodic Hann window, transformed by the
// hand-written real FFT (package fft), its power spectrum (201 bins)
// projected on Slaney-style mel filters (80 bins; 128 for large-v3) from
// 0 to 8 kHz, then log10 with a floor of 1e-10, clamped to 8 below the
// maximum, and scaled as (x+4)/4. The last STFT frame is dropped, so n
// samples give n/160 frames; Window pads or cuts to 30 s first (3000
// frames), as the reference feature extractors do for one window.
package logmel

import (
	"context"
	"fmt"
	"math"

	"fusion/engine/audio/fft"
)

// Whisper's fixed front-end parameters.
const (
	SampleRate    = 16000
	NFFT          = 400
	HopLength     = 160
	ChunkSeconds  = 30
	ChunkSamples  = ChunkSeconds * SampleRate // 480000
	ChunkFrames   = ChunkSamples / HopLength  // 3000
	maxMelFreq    = 8000.0
	logFloor      = 1e-10
	dynamicRange  = 8.0
	maxMels       = 512
	ctxCheckEvery = 256
)

// Features is a log-mel spectrogram, mel-major like the reference's
// (n_mels, frames) array: Data[m*Frames + f].
type Features struct {
	Mels, Frames int
	Data         []float32
}

// At is the value of mel bin m in frame f.
func (f Features) At(m, frame int) float32 { return f.Data[m*f.Frames+frame] }

// Extractor computes features for one mel-bin count. It is immutable and
// safe for concurrent use.
type Extractor struct {
	mels    int
	window  []float64
	plan    *fft.RealPlan
	filters []melFilter
}

// melFilter is one triangular filter: weights for bins first, first+1, ...
type melFilter struct {
	first   int
	weights []float64
}

// New builds the extractor for mels bins (80 for Whisper up to v2 and
// turbo's predecessors, 128 for large-v3).
func New(mels int) (*Extractor, error) {
	if mels < 1 || mels > maxMels {
		return nil, fmt.Errorf("logmel: %d mel bins (1..%d)", mels, maxMels)
	}
	plan, err := fft.NewReal(NFFT)
	if err != nil {
		return nil, err
	}
	e := &Extractor{mels: mels, plan: plan, window: make([]float64, NFFT)}
	for i := range e.window { // periodic Hann
		e.window[i] = 0.5 - 0.5*math.Cos(2*math.Pi*float64(i)/NFFT)
	}
	e.filters = melFilters(mels, NFFT/2+1, SampleRate)
	return e, nil
}

// Mels is the number of mel bins.
func (e *Extractor) Mels() int { return e.mels }

// hzToMel and melToHz are the Slaney scale: linear below 1 kHz (200/3 Hz
// per mel), logarithmic above (27 mels per factor 6.4).
func hzToMel(f float64) float64 {
	if f < 1000 {
		return 3 * f / 200
	}
	return 15 + math.Log(f/1000)*27/math.Log(6.4)
}

func melToHz(m float64) float64 {
	if m < 15 {
		return 200 * m / 3
	}
	return 1000 * math.Exp((m-15)*math.Log(6.4)/27)
}

// melFilters builds mels triangular filters with edges equally spaced in
// mels from 0 to 8 kHz, each scaled by 2/(its width in Hz) (Slaney's
// equal-area normalization), over bins spaced rate/2/(bins-1) Hz apart.
func melFilters(mels, bins, rate int) []melFilter {
	lo, hi := hzToMel(0), hzToMel(maxMelFreq)
	edges := make([]float64, mels+2)
	for i := range edges {
		edges[i] = melToHz(lo + (hi-lo)*float64(i)/float64(mels+1))
	}
	binHz := float64(rate) / 2 / float64(bins-1)
	out := make([]melFilter, mels)
	for m := range out {
		l, c, r := edges[m], edges[m+1], edges[m+2]
		norm := 2 / (r - l)
		f := melFilter{first: -1}
		for b := range bins {
			hz := float64(b) * binHz
			w := max(0, min((hz-l)/(c-l), (r-hz)/(r-c)))
			if w > 0 {
				if f.first < 0 {
					f.first = b
				}
				f.weights = append(f.weights, w*norm)
			} else if f.first >= 0 {
				break // a triangle's positive weights are contiguous
			}
		}
		if f.first < 0 {
			f.first = 0
		}
		out[m] = f
	}
	return out
}

// Window is the features of one 30-second window: x padded with zeros or
// cut to ChunkSamples, giving ChunkFrames frames.
func (e *Extractor) Window(ctx context.Context, x []float32) (Features, error) {
	buf := make([]float32, ChunkSamples)
	copy(buf, x)
	return e.Features(ctx, buf)
}

// Features computes the log-mel spectrogram of all of x (len(x)/160
// frames; the clamp to max-8 is over the whole of it). x must not be
// empty.
func (e *Extractor) Features(ctx context.Context, x []float32) (Features, error) {
	n := len(x)
	if n == 0 {
		return Features{}, fmt.Errorf("logmel: no samples")
	}
	frames := n / HopLength
	if frames == 0 {
		return Features{}, fmt.Errorf("logmel: %d samples, at least %d needed for one frame", n, HopLength)
	}
	out := Features{Mels: e.mels, Frames: frames, Data: make([]float32, e.mels*frames)}
	logs := make([]float64, e.mels*frames)
	frame := make([]float64, NFFT)
	spec := make([]complex128, NFFT/2+1)
	power := make([]float64, NFFT/2+1)
	peak := math.Inf(-1)
	for f := range frames {
		if f%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return Features{}, err
			}
		}
		start := f*HopLength - NFFT/2 // centred: frame f spans [start, start+NFFT)
		for i := range frame {
			frame[i] = float64(x[reflect(start+i, n)]) * e.window[i]
		}
		e.plan.Forward(spec, frame)
		for k, v := range spec {
			power[k] = real(v)*real(v) + imag(v)*imag(v)
		}
		for m, flt := range e.filters {
			var s float64
			for j, w := range flt.weights {
				s += w * power[flt.first+j]
			}
			l := math.Log10(max(s, logFloor))
			logs[m*frames+f] = l
			peak = max(peak, l)
		}
	}
	floor := peak - dynamicRange
	for i, l := range logs {
		out.Data[i] = float32((max(l, floor) + 4) / 4)
	}
	return out, nil
}

// reflect maps an index outside [0, n) into it by mirror reflection
// without repeating the edge sample (numpy's "reflect" padding), with
// period 2(n-1) for pads longer than the signal.
func reflect(i, n int) int {
	if i >= 0 && i < n {
		return i
	}
	if n == 1 {
		return 0
	}
	p := 2 * (n - 1)
	i %= p
	if i < 0 {
		i += p
	}
	if i >= n {
		i = p - i
	}
	return i
}
