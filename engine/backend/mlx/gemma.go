//go:build cgo

package mlx

/*
#include "errors.h"
*/
import "C"

import (
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// Tanh is tanh elementwise.
func (a *Arena) Tanh(x *Array) *Array {
	return a.unary("mlx_tanh", x, func(res *C.mlx_array) C.int { return C.mlx_tanh(res, x.c, a.rt.stream) })
}

// windowAttend attends q [1, heads, len, hd] of a sequence at sq.Offset
// over the cached keys and values [1, kvHeads, Offset+len, hd] it may see:
// those from the first query's window on, sliced out, and for a chunk of
// several queries a mask that also hides, per query, the keys before its
// own window and after itself (mlx-lm's create_attention_mask with
// window_size).
func windowAttend(a *Arena, q, keys, values *Array, scale float32, window int, sq backend.Seq, hd, kvh int, sinks *Array) *Array {
	end := sq.Offset + sq.Len
	start := max(0, sq.Offset+1-window)
	if start > 0 {
		keys = a.Slice(keys, []int{0, 0, start, 0}, []int{1, kvh, end, hd})
		values = a.Slice(values, []int{0, 0, start, 0}, []int{1, kvh, end, hd})
	}
	if sq.Len == 1 {
		return a.SDPA(q, keys, values, scale, false, nil, sinks)
	}
	n := end - start
	mask := make([]float32, sq.Len*n)
	inf := float32(math.Inf(-1))
	for i := range sq.Len {
		p := sq.Offset + i
		for j := range n {
			if kp := start + j; kp > p || kp <= p-window {
				mask[i*n+j] = inf
			}
		}
	}
	return a.SDPA(q, keys, values, scale, false, as(a, a.FromFloat32(mask, sq.Len, n), q.DType()), sinks)
}

// WindowAttention is Attention where each query sees the last window
// positions only.
func (s *step) WindowAttention(layer int, q, k, v backend.Array, scale float32, window int, b *backend.Batch) backend.Array {
	if window <= 0 {
		panic(fmt.Sprintf("mlx: WindowAttention: window %d", window))
	}
	return s.attention(layer, q, k, v, scale, window, nil, b)
}

// GELUTanhGate returns gelu_tanh(gate)·up, with MLX's nn.gelu_approx:
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func (s *step) GELUTanhGate(gate, up backend.Array) backend.Array {
	g, u := use(nd(gate), tensor.F32), use(nd(up), tensor.F32)
	sameShape("GELUTanhGate", g, u)
	dt := promote(g.dt, u.dt)
	return s.record(g.rows, g.cols, dt, func(a *Arena) *Array {
		// Constants in the activations' type, as Python scalars are in
		// mlx-lm's gelu_approx.
		c := func(v float64) *Array { return as(a, a.FromFloat32([]float32{float32(v)}, 1), g.dt) }
		x := g.x
		cube := a.Multiply(a.Multiply(x, x), x)
		inner := a.Multiply(a.Add(x, a.Multiply(cube, c(0.044715))), c(math.Sqrt(2/math.Pi)))
		gelu := a.Multiply(a.Multiply(x, c(0.5)), a.Add(a.Tanh(inner), c(1)))
		return a.Multiply(gelu, u.x)
	})
}

// Softcap returns tanh(x/cap)·cap.
func (s *step) Softcap(x backend.Array, limit float32) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array {
		c := func(v float32) *Array { return as(a, a.FromFloat32([]float32{v}, 1), in.dt) }
		return a.Multiply(a.Tanh(a.Multiply(in.x, c(1/limit))), c(limit))
	})
}

// Scale returns x·c.
func (s *step) Scale(x backend.Array, c float32) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array {
		return a.Multiply(in.x, as(a, a.FromFloat32([]float32{c}, 1), in.dt))
	})
}
