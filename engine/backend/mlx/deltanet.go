//go:build cgo

package mlx

/*
#include "errors.h"
*/
import "C"

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

var _ backend.RecurrentOps = (*step)(nil)

// Exp returns e^x elementwise.
func (a *Arena) Exp(x *Array) *Array {
	return a.unary("mlx_exp", x, func(res *C.mlx_array) C.int { return C.mlx_exp(res, x.c, a.rt.stream) })
}

// LogAddExp returns log(e^x + e^y) elementwise (broadcasting): softplus
// with y = 0, as mlx.nn.softplus computes it.
func (a *Arena) LogAddExp(x, y *Array) *Array {
	return a.op("mlx_logaddexp", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_logaddexp(res, x.c, y.c, a.rt.stream) })
}

// Subtract returns x − y (broadcasting).
func (a *Arena) Subtract(x, y *Array) *Array {
	return a.op("mlx_subtract", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_subtract(res, x.c, y.c, a.rt.stream) })
}

// Sum adds x along axis (kept as size 1 with keep).
func (a *Arena) Sum(x *Array, axis int, keep bool) *Array {
	return a.unary("mlx_sum_axis", x, func(res *C.mlx_array) C.int { return C.mlx_sum_axis(res, x.c, C.int(axis), C.bool(keep), a.rt.stream) })
}

// pair records an op of two outputs: build makes both, joined as one flat
// row (the step's nodes have one array each), and two nodes slice them
// out, [rows1, cols1] and [rows2, cols2], float32.
func (s *step) pair(rows1, cols1, rows2, cols2 int, build func(a *Arena) (*Array, *Array)) (backend.Array, backend.Array) {
	n1, n2 := rows1*cols1, rows2*cols2
	joint := s.record(1, n1+n2, tensor.F32, func(a *Arena) *Array {
		x, y := build(a)
		return a.Concatenate([]*Array{a.Reshape(f32(a, x), 1, n1), a.Reshape(f32(a, y), 1, n2)}, 1)
	})
	first := s.record(rows1, cols1, tensor.F32, func(a *Arena) *Array {
		return a.Reshape(a.Slice(joint.x, []int{0, 0}, []int{1, n1}), rows1, cols1)
	})
	second := s.record(rows2, cols2, tensor.F32, func(a *Arena) *Array {
		return a.Reshape(a.Slice(joint.x, []int{0, n1}, []int{1, n1 + n2}), rows2, cols2)
	})
	return first, second
}

// CausalConv is the depthwise causal convolution with its state, per
// sequence: [state; x] along time, then Σ_j in[j : j+n]·w[:, j] in
// float32 (j in order), and the last kernel−1 rows as the new state.
func (s *step) CausalConv(x, state backend.Array, w backend.Vector, kernel int, lens []int) (backend.Array, backend.Array) {
	if err := backend.ConvStateShape(x, state, w, kernel, lens); err != nil {
		panic("mlx: " + err.Error())
	}
	in, st, wv := use(nd(x), tensor.F32), use(nd(state), tensor.F32), w.(*vector)
	c, keep := in.cols, kernel-1
	lens = append([]int(nil), lens...)
	return s.pair(in.rows, c, st.rows, st.cols, func(a *Arena) (*Array, *Array) {
		taps := a.Transpose(a.Reshape(f32(a, wv.v), c, kernel), 1, 0) // [kernel, C]
		var outs, states []*Array
		row := 0
		for i, n := range lens {
			prev := a.Reshape(a.Slice(f32(a, st.x), []int{i, 0}, []int{i + 1, st.cols}), keep, c)
			seq := a.Concatenate([]*Array{prev, a.Slice(f32(a, in.x), []int{row, 0}, []int{row + n, c})}, 0)
			var sum *Array
			for j := range kernel {
				term := a.Multiply(a.Slice(seq, []int{j, 0}, []int{j + n, c}), a.Slice(taps, []int{j, 0}, []int{j + 1, c}))
				if sum == nil {
					sum = term
				} else {
					sum = a.Add(sum, term)
				}
			}
			outs = append(outs, sum)
			states = append(states, a.Reshape(a.Slice(seq, []int{n, 0}, []int{n + keep, c}), 1, keep*c))
			row += n
		}
		return a.Concatenate(outs, 0), a.Concatenate(states, 0)
	})
}

// GatedDelta runs the gated delta rule token by token as mlx-lm's
// gated_delta_ops does (per step: decay, S·k, the delta update, S·q), in
// float32, value heads reading their key head through a take.
func (s *step) GatedDelta(q, k, v, a, b, state backend.Array, aLog, dtBias backend.Vector, kHeads int, lens []int) (backend.Array, backend.Array) {
	hk, dk, hv, dv, err := backend.DeltaShape(q, k, v, a, b, state, aLog, dtBias, kHeads, lens)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	qn, kn, vn := use(nd(q), tensor.F32), use(nd(k), tensor.F32), use(nd(v), tensor.F32)
	an, bn, sn := use(nd(a), tensor.F32), use(nd(b), tensor.F32), use(nd(state), tensor.F32)
	al, dt := aLog.(*vector), dtBias.(*vector)
	lens = append([]int(nil), lens...)
	heads := make([]int32, hv)
	for h := range heads {
		heads[h] = int32(h / (hv / hk))
	}
	return s.pair(qn.rows, hv*dv, sn.rows, sn.cols, func(ar *Arena) (*Array, *Array) {
		idx := ar.FromInt32(heads, hv)
		expand := func(x *Array) *Array { return ar.Take(ar.Reshape(f32(ar, x), -1, hk, dk), idx, 1) } // [rows, hv, dk]
		qs, ks := expand(qn.x), expand(kn.x)
		vs := ar.Reshape(f32(ar, vn.x), -1, hv, dv)
		zero := ar.FromFloat32([]float32{0}, 1)
		x := ar.Add(f32(ar, an.x), ar.Reshape(f32(ar, dt.v), 1, hv))
		g := ar.Exp(ar.Multiply(ar.Subtract(zero, ar.Exp(ar.Reshape(f32(ar, al.v), 1, hv))), ar.LogAddExp(x, zero))) // [rows, hv]
		beta := ar.Sigmoid(f32(ar, bn.x))
		var ys, states []*Array
		row := 0
		for i, n := range lens {
			S := ar.Reshape(ar.Slice(f32(ar, sn.x), []int{i, 0}, []int{i + 1, sn.cols}), hv, dv, dk)
			for t := row; t < row+n; t++ {
				at := func(x *Array, w int) *Array {
					return ar.Reshape(ar.Slice(x, []int{t, 0, 0}, []int{t + 1, hv, w}), hv, 1, w)
				}
				qt, kt, vt := at(qs, dk), at(ks, dk), ar.Reshape(ar.Slice(vs, []int{t, 0, 0}, []int{t + 1, hv, dv}), hv, dv)
				gt := ar.Reshape(ar.Slice(g, []int{t, 0}, []int{t + 1, hv}), hv, 1, 1)
				bt := ar.Reshape(ar.Slice(beta, []int{t, 0}, []int{t + 1, hv}), hv, 1)
				S = ar.Multiply(S, gt)
				mem := ar.Sum(ar.Multiply(S, kt), 2, false)                  // [hv, dv]
				delta := ar.Multiply(ar.Subtract(vt, mem), bt)               // [hv, dv]
				S = ar.Add(S, ar.Multiply(kt, ar.Reshape(delta, hv, dv, 1))) // [hv, dv, dk]
				ys = append(ys, ar.Reshape(ar.Sum(ar.Multiply(S, qt), 2, false), 1, hv*dv))
			}
			states = append(states, ar.Reshape(S, 1, hv*dv*dk))
			row += n
		}
		return ar.Concatenate(ys, 0), ar.Concatenate(states, 0)
	})
}

// SigmoidGate returns x·sigmoid(g), g as wide as x or one column
// (broadcast), in float32.
func (s *step) SigmoidGate(x, g backend.Array) backend.Array {
	xn, gn := use(nd(x), tensor.F32), use(nd(g), tensor.F32)
	if gn.rows != xn.rows || (gn.cols != xn.cols && gn.cols != 1) {
		panic(fmt.Sprintf("mlx: SigmoidGate: x [%d, %d], gate [%d, %d]", xn.rows, xn.cols, gn.rows, gn.cols))
	}
	return s.record(xn.rows, xn.cols, tensor.F32, func(a *Arena) *Array {
		return a.Multiply(f32(a, xn.x), a.Sigmoid(f32(a, gn.x)))
	})
}
