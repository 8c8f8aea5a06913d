package cpu

import (
	"math"

	"fusion/engine/backend"
)

// GELUTanhGate returns gelu_tanh(gate)·up.
func (s *step) GELUTanhGate(gate, up backend.Array) backend.Array {
	return s.gated("GELUTanhGate", gate, up, func(g, u float32) float32 { return geluTanh(g) * u })
}

// gated returns f(gate, up) elementwise.
func (s *step) gated(op string, gate, up backend.Array, f func(g, u float32) float32) backend.Array {
	g, u := arr(gate), arr(up)
	sameShape(op, g, u)
	out := s.new(g.rows, g.cols)
	s.b.parallelRows(g.rows, elementwiseRows(g.cols), func(lo, hi int) {
		src, mul, dst := g.data[lo*g.cols:hi*g.cols], u.data[lo*g.cols:hi*g.cols], out.data[lo*g.cols:hi*g.cols]
		for i, v := range src {
			dst[i] = f(v, mul[i])
		}
	})
	return out
}

// geluTanh is x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))/2, in float64.
func geluTanh(v float32) float32 {
	x := float64(v)
	return float32(0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))))
}

// Softcap returns tanh(x/cap)·cap.
func (s *step) Softcap(x backend.Array, limit float32) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	c := float64(limit)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		src, dst := a.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i, v := range src {
			dst[i] = float32(math.Tanh(float64(v)/c) * c)
		}
	})
	return out
}

// Scale returns x·c.
func (s *step) Scale(x backend.Array, c float32) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		s.b.k.Scale(out.data[lo*a.cols:hi*a.cols], a.data[lo*a.cols:hi*a.cols], c)
	})
	return out
}
