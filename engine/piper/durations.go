package piper

import (
	"context"
	"fmt"
	"math"

	"fusion/engine/backend"
)

// The stochastic duration predictor (VITS's StochasticDurationPredictor,
// run in reverse as inference does): the text encoder's hidden states go
// through a 1×1 convolution, a dilated depthwise-separable stack (DDSConv)
// and another 1×1 convolution to condition the flows; noise [phonemes, 2]
// (zero when noise_w is 0) goes backwards through the flows — a channel
// flip, then for each coupling flow a rational-quadratic spline of one
// channel given the other, then the elementwise affine — and the first
// channel is log(duration).
//
// The convolution stacks run on the backend. The spline, the flips and
// the affine act on phonemes×2 numbers: they run here, on values read
// back, as sampling does.

const (
	ddsKernel    = 3
	ddsLayers    = 3
	splineBins   = 10
	splineTail   = 5.0
	minBinWidth  = 1e-3
	minBinHeight = 1e-3
	minDeriv     = 1e-3
)

// ddsConv is one DDSConv stack: per layer a depthwise convolution with
// dilation 3^i, layer norm, GELU, a 1×1 convolution, layer norm, GELU,
// and a residual.
type ddsConv struct {
	sep       [][]float32 // per layer [kernel][channels]: the depthwise taps
	sepBias   [][]float32
	pointwise []backend.Weight
	norm1     [][2]backend.Vector
	norm2     [][2]backend.Vector
}

// convFlow is one coupling flow of the duration predictor.
type convFlow struct {
	pre  backend.Weight // [hidden, 1]
	dds  ddsConv
	proj backend.Weight // [3·bins−1, hidden]
}

type durationPredictor struct {
	pre, proj backend.Weight
	dds       ddsConv
	flows     []convFlow // in the order inference runs them
	mean      [2]float32 // the elementwise affine's m
	invScale  [2]float32 // its exp(−logs)
}

func (l *loader) dds(path string, ch int) ddsConv {
	var d ddsConv
	for i := range ddsLayers {
		w := l.floats(fmt.Sprintf("%s.convs_sep.%d.weight", path, i), ch, 1, ddsKernel)
		b := l.floats(fmt.Sprintf("%s.convs_sep.%d.bias", path, i), ch)
		taps := make([]float32, ddsKernel*ch)
		for c := 0; c < ch && w != nil; c++ {
			for j := range ddsKernel {
				taps[j*ch+c] = w[c*ddsKernel+j]
			}
		}
		d.sep = append(d.sep, taps)
		d.sepBias = append(d.sepBias, b)
		d.pointwise = append(d.pointwise, l.conv(fmt.Sprintf("%s.convs_1x1.%d", path, i), ch, ch, 1))
		n1, n2 := fmt.Sprintf("%s.norms_1.%d.", path, i), fmt.Sprintf("%s.norms_2.%d.", path, i)
		d.norm1 = append(d.norm1, [2]backend.Vector{l.vector(n1+"gamma", ch), l.vector(n1+"beta", ch)})
		d.norm2 = append(d.norm2, [2]backend.Vector{l.vector(n2+"gamma", ch), l.vector(n2+"beta", ch)})
	}
	return d
}

// loadDurations reads the duration predictor: dp.pre/convs/proj, the
// coupling flows inference uses (dp.flows.7, 5, 3: the first coupling
// flow is dropped in reverse, as VITS does) and the affine dp.flows.0,
// whose exp(−logs) the exporter folded into a constant.
func (l *loader) loadDurations() {
	v := l.v
	h := v.Dims.Hidden
	dp := &v.dp
	dp.pre = l.conv("dp.pre", h, h, 1)
	dp.dds = l.dds("dp.convs", h)
	dp.proj = l.conv("dp.proj", h, h, 1)
	for _, i := range []int{7, 5, 3} {
		p := fmt.Sprintf("dp.flows.%d", i)
		dp.flows = append(dp.flows, convFlow{
			pre:  l.conv(p+".pre", h, 1, 1),
			dds:  l.dds(p+".convs", h),
			proj: l.conv(p+".proj", 3*splineBins-1, h, 1),
		})
	}
	m := l.floats("dp.flows.0.m", 2, 1)
	var inv []float32
	if n, ok := l.g.NodeInput("/dp/flows.0/Mul", 1); ok && len(n.Shape) == 2 && n.Shape[0] == 2 {
		inv = l.floats(n.Name, 2, 1)
	} else if l.Err() == nil {
		l.Fail(fmt.Errorf("%w: no duration affine scale (/dp/flows.0/Mul)", ErrNotPiper))
	}
	if m != nil && inv != nil {
		dp.mean = [2]float32{m[0], m[1]}
		dp.invScale = [2]float32{inv[0], inv[1]}
	}
}

// run applies the stack to x [T, C], conditioned on g (added first) if
// not nil.
func (d *ddsConv) run(s backend.Step, x, g backend.Array) backend.Array {
	if g != nil {
		x = s.Add(x, g)
	}
	n, ch := x.Rows(), x.Cols()
	zero := s.Input(1, ch, make([]float32, ch))
	dil := 1
	for i := range ddsLayers {
		// Depthwise convolution as a sum of shifted copies times each
		// tap's per-channel row (Gate: res + row·x), zeros past the ends.
		padded := s.ConcatRows(x, zero)
		acc := s.Input(n, ch, repeatRow(d.sepBias[i], n))
		pad := dil * (ddsKernel - 1) / 2
		for j := range ddsKernel {
			idx := make([]int, n)
			for t := range n {
				src := t + j*dil - pad
				if src < 0 || src >= n {
					src = n
				}
				idx[t] = src
			}
			acc = s.Gate(acc, s.Rows(padded, idx), s.Input(1, ch, d.sep[i][j*ch:(j+1)*ch]))
		}
		y := s.GELU(s.LayerNorm(acc, d.norm1[i][0], d.norm1[i][1], normEps))
		y = s.GELU(s.LayerNorm(s.Linear(y, d.pointwise[i]), d.norm2[i][0], d.norm2[i][1], normEps))
		x = s.Add(x, y)
		dil *= ddsKernel
	}
	return x
}

func repeatRow(row []float32, n int) []float32 {
	out := make([]float32, 0, n*len(row))
	for range n {
		out = append(out, row...)
	}
	return out
}

// Durations predicts each phoneme's length in frames from the text
// encoder's output, as Piper's graph computes w_ceil: ceil(exp(logw) ·
// lengthScale), with noise (scaled by noiseW) from noise, which must hold
// 2 values per phoneme when noiseW is not 0. It returns the log-durations
// too.
func (v *Voice) Durations(ctx context.Context, enc *Encoded, lengthScale, noiseW float32, noise []float32) (frames []int, logw []float32, err error) {
	n, h := enc.Rows, v.Dims.Hidden
	z := make([]float64, 2*n) // [T, 2] row-major
	if noiseW != 0 {
		if len(noise) != 2*n {
			return nil, nil, fmt.Errorf("piper: %d noise values for %d phonemes, want %d", len(noise), n, 2*n)
		}
		for i, e := range noise {
			z[i] = float64(e * noiseW)
		}
	}
	dp := &v.dp
	s := v.be.NewStep(ctx)
	defer s.Close()
	cond := s.Linear(dp.dds.run(s, s.Linear(s.Input(n, h, enc.Hidden), dp.pre), nil), dp.proj)
	flip := func() {
		for t := range n {
			z[2*t], z[2*t+1] = z[2*t+1], z[2*t]
		}
	}
	for _, f := range dp.flows {
		flip()
		mark := s.Mark()
		x0 := make([]float32, n)
		for t := range n {
			x0[t] = float32(z[2*t])
		}
		hid := f.dds.run(s, s.Linear(s.Input(n, 1, x0), f.pre), cond)
		params, err := s.Read(s.Linear(hid, f.proj))
		if err != nil {
			return nil, nil, err
		}
		cond = s.Release(mark, cond)
		w := 3*splineBins - 1
		scale := 1 / math.Sqrt(float64(h))
		for t := range n {
			p := params[t*w : (t+1)*w]
			z[2*t+1] = splineInverse(z[2*t+1], p[:splineBins], p[splineBins:2*splineBins], p[2*splineBins:], scale)
		}
	}
	flip()
	frames = make([]int, n)
	logw = make([]float32, n)
	for t := range n {
		// The affine in reverse: (z − m)·exp(−logs); channel 0 is log w.
		lw := float32((z[2*t] - float64(dp.mean[0])) * float64(dp.invScale[0]))
		logw[t] = lw
		frames[t] = int(math.Ceil(float64(float32(math.Exp(float64(lw))) * lengthScale)))
	}
	return frames, logw, s.Err()
}

// splineInverse is the inverse of the unconstrained rational-quadratic
// spline of Neural Spline Flows with linear tails (VITS's transforms.py,
// tail bound 5, 10 bins): identity outside [−B, B]; inside, the bin of x
// among the knots' heights and the root of the bin's quadratic. Widths
// and heights come from a softmax of uw·scale and uh·scale, the inner
// derivatives from softplus(ud) (the two ends fixed at 1).
func splineInverse(x float64, uw, uh, ud []float32, scale float64) float64 {
	const b = splineTail
	if x < -b || x > b {
		return x
	}
	knots := func(u []float32, minBin float64) (cum [splineBins + 1]float64) {
		var m float64 = math.Inf(-1)
		for _, v := range u {
			m = max(m, float64(v)*scale)
		}
		var p [splineBins]float64
		var sum float64
		for i, v := range u {
			p[i] = math.Exp(float64(v)*scale - m)
			sum += p[i]
		}
		var acc float64
		cum[0] = -b
		for i := range splineBins {
			acc += minBin + (1-minBin*splineBins)*p[i]/sum
			cum[i+1] = 2*b*acc - b
		}
		cum[splineBins] = b
		return cum
	}
	cw, ch := knots(uw, minBinWidth), knots(uh, minBinHeight)
	var d [splineBins + 1]float64
	d[0], d[splineBins] = 1, 1
	for i := 1; i < splineBins; i++ {
		d[i] = minDeriv + softplus(float64(ud[i-1]))
	}
	// Bin: the number of inner knots at or below x (the last knot is
	// nudged up by 1e-6, as searchsorted is given).
	k := 0
	for i := 1; i <= splineBins; i++ {
		edge := ch[i]
		if i == splineBins {
			edge += 1e-6
		}
		if x >= edge {
			k = i
		}
	}
	k = min(k, splineBins-1)
	w, hgt := cw[k+1]-cw[k], ch[k+1]-ch[k]
	delta := hgt / w
	dx := x - ch[k]
	sumD := d[k] + d[k+1] - 2*delta
	qa := dx*sumD + hgt*(delta-d[k])
	qb := hgt*d[k] - dx*sumD
	qc := -delta * dx
	disc := qb*qb - 4*qa*qc
	root := 2 * qc / (-qb - math.Sqrt(disc))
	return root*w + cw[k]
}

func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}
