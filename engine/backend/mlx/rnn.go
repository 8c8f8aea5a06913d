//go:build cgo

package mlx

/*
#include "errors.h"
*/
import "C"

import (
	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// Sqrt is the square root, elementwise.
func (a *Arena) Sqrt(x *Array) *Array {
	return a.unary("mlx_sqrt", x, func(res *C.mlx_array) C.int { return C.mlx_sqrt(res, x.c, a.rt.stream) })
}

// LSTMCell slices the four gates out of gates, applies their activations
// and joins [h' | c'] along the columns, in float32.
func (s *step) LSTMCell(gates, c backend.Array) backend.Array {
	g, ca := use(nd(gates), tensor.F32), use(nd(c), tensor.F32)
	h, err := backend.LSTMShape(g, ca)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	rows := g.rows
	return s.record(rows, 2*h, tensor.F32, func(a *Arena) *Array {
		x := f32(a, g.x)
		gate := func(k int) *Array { return a.Slice(x, []int{0, k * h}, []int{rows, (k + 1) * h}) }
		i, f, cand, o := a.Sigmoid(gate(0)), a.Sigmoid(gate(1)), a.Tanh(gate(2)), a.Sigmoid(gate(3))
		cn := a.Add(a.Multiply(f, f32(a, ca.x)), a.Multiply(i, cand))
		hn := a.Multiply(o, a.Tanh(cn))
		return a.Concatenate([]*Array{hn, cn}, 1)
	})
}

// Sigmoid is 1/(1+e^−x).
func (s *step) Sigmoid(x backend.Array) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array { return a.Sigmoid(in.x) })
}

// ComplexAbs is sqrt(re² + im²) of the two column halves, in float32.
func (s *step) ComplexAbs(x backend.Array) backend.Array {
	in := use(nd(x), tensor.F32)
	n, err := backend.ComplexAbsShape(in)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	rows := in.rows
	return s.record(rows, n, tensor.F32, func(a *Arena) *Array {
		v := f32(a, in.x)
		re := a.Slice(v, []int{0, 0}, []int{rows, n})
		im := a.Slice(v, []int{0, n}, []int{rows, 2 * n})
		return a.Sqrt(a.Add(a.Multiply(re, re), a.Multiply(im, im)))
	})
}
