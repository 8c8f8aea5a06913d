package cpu

import (
	"math"

	"fusion/engine/backend"
)

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// LSTMCell runs the cell's gates row by row in float64.
func (s *step) LSTMCell(gates, c backend.Array) backend.Array {
	g, ca := arr(gates), arr(c)
	h, err := backend.LSTMShape(g, ca)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	out := s.new(g.rows, 2*h)
	for r := range g.rows {
		gr, cr, dst := g.row(r), ca.row(r), out.row(r)
		for j := range h {
			i := sigmoid64(float64(gr[j]))
			f := sigmoid64(float64(gr[h+j]))
			cand := math.Tanh(float64(gr[2*h+j]))
			o := sigmoid64(float64(gr[3*h+j]))
			cn := f*float64(cr[j]) + i*cand
			dst[j] = float32(o * math.Tanh(cn))
			dst[h+j] = float32(cn)
		}
	}
	return out
}

// Sigmoid returns 1/(1+e^−x).
func (s *step) Sigmoid(x backend.Array) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		src, dst := a.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i, v := range src {
			dst[i] = float32(sigmoid64(float64(v)))
		}
	})
	return out
}

// ComplexAbs returns √(re² + im²) of the two halves of each row.
func (s *step) ComplexAbs(x backend.Array) backend.Array {
	a := arr(x)
	n, err := backend.ComplexAbsShape(a)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	out := s.new(a.rows, n)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			src, dst := a.row(r), out.row(r)
			for j := range n {
				re, im := float64(src[j]), float64(src[n+j])
				dst[j] = float32(math.Sqrt(re*re + im*im))
			}
		}
	})
	return out
}
