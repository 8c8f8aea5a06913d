package piper

import (
	"context"
	"fmt"
	"math"
	"slices"

	"fusion/engine/backend"
)

// MaxFrames caps one sentence's spectrogram frames (hop 256 at 22.05 kHz:
// about 95 s), whatever the durations predict.
const MaxFrames = 8192

// Scales are one synthesis's noise and speed settings (Piper's
// "scales" input): 0 noise makes it deterministic.
type Scales struct {
	Noise  float32 // the prior's noise (flow input)
	Length float32 // > 1 speaks slower
	NoiseW float32 // the duration predictor's noise
}

// Synthesize turns one sentence's phoneme ids into samples in [−1, 1] at
// the voice's rate: text encoder, durations, length regulation, the
// prior (mean plus noise·exp(log-scale) per frame), the flow in reverse
// and the HiFi-GAN decoder. normal supplies standard normal numbers when
// a noise scale is not 0 (nil otherwise).
func (v *Voice) Synthesize(ctx context.Context, ids []int64, sc Scales, normal func() float32) ([]float32, error) {
	if (sc.Noise != 0 || sc.NoiseW != 0) && normal == nil {
		return nil, fmt.Errorf("piper: noise scales %v and %v need a noise source", sc.Noise, sc.NoiseW)
	}
	if !(sc.Length > 0) || sc.Length > 10 {
		return nil, fmt.Errorf("piper: length scale %v outside (0, 10]", sc.Length)
	}
	enc, err := v.EncodeText(ctx, ids)
	if err != nil {
		return nil, err
	}
	var dnoise []float32
	if sc.NoiseW != 0 {
		dnoise = make([]float32, 2*enc.Rows)
		for i := range dnoise {
			dnoise[i] = normal()
		}
	}
	frames, _, err := v.Durations(ctx, enc, sc.Length, sc.NoiseW, dnoise)
	if err != nil {
		return nil, err
	}
	h := v.Dims.Hidden
	total := 0
	for _, f := range frames {
		total += max(f, 0)
	}
	total = max(total, 1)
	if total > MaxFrames {
		return nil, fmt.Errorf("piper: %d frames over the %d-frame limit (split the text)", total, MaxFrames)
	}
	// Length regulation: each phoneme's prior repeated over its frames.
	z := make([]float32, 0, total*h)
	for t, f := range frames {
		for range f {
			for c := range h {
				x := enc.Mean[t*h+c]
				if sc.Noise != 0 {
					x += normal() * float32(math.Exp(float64(enc.LogStd[t*h+c]))) * sc.Noise
				}
				z = append(z, x)
			}
		}
	}
	if len(z) == 0 {
		z = make([]float32, h)
	}
	if z, err = v.flowReverse(ctx, z, total); err != nil {
		return nil, err
	}
	return v.decode(ctx, z, total)
}

// flowReverse runs the flow backwards over z [frames, hidden]: per
// coupling layer, the channels reversed, then the second half shifted by
// minus what WaveNet predicts from the first.
func (v *Voice) flowReverse(ctx context.Context, z []float32, n int) ([]float32, error) {
	h := v.Dims.Hidden
	half := h / 2
	s := v.be.NewStep(ctx)
	defer s.Close()
	x0 := make([]float32, n*half)
	anchor := s.Input(1, 1, []float32{0}) // made before each mark: Release keeps it in place
	for _, c := range v.flow {
		for t := range n {
			slices.Reverse(z[t*h : (t+1)*h])
			copy(x0[t*half:(t+1)*half], z[t*h:t*h+half])
		}
		mark := s.Mark()
		x := s.Linear(s.Input(n, half, x0), c.pre)
		var out backend.Array
		for i, in := range c.in {
			act := s.GatedTanh(s.Conv1D(x, in.parts[0], in.kernel, 1, in.pad), s.Conv1D(x, in.parts[1], in.kernel, 1, in.pad))
			rs := c.resSkip[i]
			var skip backend.Array
			if rs.parts == nil {
				skip = s.Linear(act, rs.whole)
			} else {
				x = s.Add(x, s.Linear(act, rs.parts[0]))
				skip = s.Linear(act, rs.parts[1])
			}
			if out == nil {
				out = skip
			} else {
				out = s.Add(out, skip)
			}
		}
		m, err := s.Read(s.Linear(out, c.post))
		if err != nil {
			return nil, err
		}
		s.Release(mark, anchor)
		for t := range n {
			row := z[t*h+half : (t+1)*h]
			for i := range row {
				row[i] -= m[t*half+i]
			}
		}
	}
	return z, s.Err()
}

// decode runs HiFi-GAN over z [frames, hidden]: the input convolution,
// per stage a leaky ReLU, the transposed convolution and the mean of the
// residual blocks, then a leaky ReLU, the output convolution and tanh.
func (v *Voice) decode(ctx context.Context, z []float32, n int) ([]float32, error) {
	g := &v.dec
	s := v.be.NewStep(ctx)
	defer s.Close()
	x := g.pre.run(s, s.Input(n, v.Dims.Hidden, z))
	for st, up := range g.ups {
		mark := s.Mark()
		x = up.run(s, s.LeakyReLU(x, 0.1))
		var sum backend.Array
		for _, rb := range g.resblocks[st] {
			y := x
			for _, c := range rb {
				y = s.Add(c.run(s, s.LeakyReLU(y, 0.1)), y)
			}
			if sum == nil {
				sum = y
			} else {
				sum = s.Add(sum, y)
			}
		}
		x = s.Release(mark, s.Scale(sum, 1/float32(len(g.resblocks[st]))))
	}
	y, err := s.Read(g.post.run(s, s.LeakyReLU(x, 0.01)))
	if err != nil {
		return nil, err
	}
	for i, v := range y {
		y[i] = float32(math.Tanh(float64(v)))
	}
	return y, s.Err()
}
