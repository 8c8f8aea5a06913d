package cpu

import (
	"fmt"

	"fusion/engine/backend"
)

// RMSNorm normalizes each group of w.Len() features of every row.
func (s *step) RMSNorm(x backend.Array, w backend.Vector, eps float32) backend.Array {
	a := arr(x)
	v, ok := w.(*vector)
	if !ok {
		panic(fmt.Sprintf("cpu: vector of another backend (%T)", w))
	}
	n := len(v.v)
	if a.cols%n != 0 {
		panic(fmt.Sprintf("cpu: RMSNorm: %d features are not groups of %d", a.cols, n))
	}
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for i := lo * a.cols; i < hi*a.cols; i += n {
			s.b.k.RMSNorm(out.data[i:i+n], a.data[i:i+n], v.v, eps)
		}
	})
	return out
}
