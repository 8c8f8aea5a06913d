package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
)

var _ backend.RecurrentOps = (*step)(nil)

// CausalConv is the depthwise causal convolution with its state (see
// backend.RecurrentOps).
func (s *step) CausalConv(x, state backend.Array, w backend.Vector, kernel int, lens []int) (backend.Array, backend.Array) {
	if err := backend.ConvStateShape(x, state, w, kernel, lens); err != nil {
		panic("cpu: " + err.Error())
	}
	a, st, wv := arr(x), arr(state), vec(w)
	c, keep := a.cols, kernel-1
	out, next := s.new(a.rows, c), s.new(st.rows, st.cols)
	row := 0
	for i, n := range lens {
		// in[t] is the state's row t for t < keep, else x's row t−keep.
		in := func(t int) []float32 {
			if t < keep {
				return st.data[i*st.cols+t*c : i*st.cols+(t+1)*c]
			}
			return a.row(row + t - keep)
		}
		for t := range n {
			o := out.row(row + t)
			for ch := range c {
				var sum float32
				for j := range kernel {
					sum += wv[ch*kernel+j] * in(t + j)[ch]
				}
				o[ch] = sum
			}
		}
		for t := range keep {
			copy(next.data[i*st.cols+t*c:i*st.cols+(t+1)*c], in(n+t))
		}
		row += n
	}
	return out, next
}

// GatedDelta runs the gated delta rule token by token (see
// backend.RecurrentOps), each value head of a sequence on its own core.
func (s *step) GatedDelta(q, k, v, a, b, state backend.Array, aLog, dtBias backend.Vector, kHeads int, lens []int) (backend.Array, backend.Array) {
	_, dk, hv, dv, err := backend.DeltaShape(q, k, v, a, b, state, aLog, dtBias, kHeads, lens)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	qa, ka, va, aa, ba, st := arr(q), arr(k), arr(v), arr(a), arr(b), arr(state)
	al, dt := vec(aLog), vec(dtBias)
	y, next := s.new(qa.rows, va.cols), s.new(st.rows, st.cols)
	copy(next.data, st.data)
	group := hv / kHeads
	row := 0
	for i, n := range lens {
		first := row
		s.b.parallel(hv, func(_, h int) {
			m := next.data[i*st.cols+h*dv*dk : i*st.cols+(h+1)*dv*dk]
			kh := h / group
			for t := first; t < first+n; t++ {
				g := deltaDecay(aa.row(t)[h], al[h], dt[h])
				beta := sigmoid(ba.row(t)[h])
				qv, kv := qa.row(t)[kh*dk:(kh+1)*dk], ka.row(t)[kh*dk:(kh+1)*dk]
				vv, out := va.row(t)[h*dv:(h+1)*dv], y.row(t)[h*dv:(h+1)*dv]
				for r := range dv {
					sr := m[r*dk : (r+1)*dk]
					var mem float32
					for c := range dk {
						sr[c] *= g
						mem += sr[c] * kv[c]
					}
					delta := (vv[r] - mem) * beta
					var o float32
					for c := range dk {
						sr[c] += kv[c] * delta
						o += sr[c] * qv[c]
					}
					out[r] = o
				}
			}
		})
		row += n
	}
	return y, next
}

// deltaDecay is exp(−exp(aLog)·softplus(a + dtBias)), mlx-lm's compute_g.
func deltaDecay(a, aLog, dtBias float32) float32 {
	x := float64(a + dtBias)
	softplus := max(x, 0) + math.Log1p(math.Exp(-math.Abs(x)))
	return float32(math.Exp(-math.Exp(float64(aLog)) * softplus))
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SigmoidGate returns x·sigmoid(g), g as wide as x or one column.
func (s *step) SigmoidGate(x, g backend.Array) backend.Array {
	a, ga := arr(x), arr(g)
	if ga.rows != a.rows || (ga.cols != a.cols && ga.cols != 1) {
		panic(fmt.Sprintf("cpu: SigmoidGate: x [%d, %d], gate [%d, %d]", a.rows, a.cols, ga.rows, ga.cols))
	}
	out := s.new(a.rows, a.cols)
	for r := range a.rows {
		src, gr, dst := a.row(r), ga.row(r), out.row(r)
		for i, v := range src {
			dst[i] = v * sigmoid(gr[min(i, ga.cols-1)])
		}
	}
	return out
}

// vec unwraps a vector of this backend.
func vec(w backend.Vector) []float32 {
	v, ok := w.(*vector)
	if !ok {
		panic(fmt.Sprintf("cpu: vector of another backend (%T)", w))
	}
	return v.v
}
