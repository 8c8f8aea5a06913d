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

// Minimum returns min(x, y) elementwise (broadcasting).
func (a *Arena) Minimum(x, y *Array) *Array {
	return a.op("mlx_minimum", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_minimum(res, x.c, y.c, a.rt.stream) })
}

// Maximum returns max(x, y) elementwise (broadcasting).
func (a *Arena) Maximum(x, y *Array) *Array {
	return a.op("mlx_maximum", []*Array{x, y}, func(res *C.mlx_array) C.int { return C.mlx_maximum(res, x.c, y.c, a.rt.stream) })
}

// SDPA is fast.scaled_dot_product_attention with every option: causal
// (else no mask unless mask, an additive [qL, kL] mask, is given) and
// sinks, one logit per query head counted in each softmax (or nil).
func (a *Arena) SDPA(q, k, v *Array, scale float32, causal bool, mask, sinks *Array) *Array {
	mode := cNone
	if causal && mask == nil {
		mode = cCausal
	}
	in := []*Array{q, k, v}
	m, sk := C.mlx_array_new(), C.mlx_array_new()
	if mask != nil {
		in, m = append(in, mask), mask.c
	}
	if sinks != nil {
		in, sk = append(in, sinks), sinks.c
	}
	return a.op("mlx_fast_scaled_dot_product_attention", in, func(res *C.mlx_array) C.int {
		return C.mlx_fast_scaled_dot_product_attention(res, q.c, k.c, v.c, C.float(scale), mode, m, sk, a.rt.stream)
	})
}

// SinkAttention is Attention (window 0) or WindowAttention with a sink
// logit per query head: MLX's sdpa with its sinks argument.
func (s *step) SinkAttention(layer int, q, k, v backend.Array, scale float32, window int, sinks backend.Vector, b *backend.Batch) backend.Array {
	if window < 0 {
		panic(fmt.Sprintf("mlx: SinkAttention: window %d", window))
	}
	return s.attention(layer, q, k, v, scale, window, sinks.(*vector), b)
}

// ClampedSwiGLU returns (clip(up, −limit, limit) + 1)·g·sigmoid(alpha·g),
// g = min(gate, limit), with the constants in the activations' type as
// mlx-lm's swiglu_oai has them (Python scalars).
func (s *step) ClampedSwiGLU(gate, up backend.Array, alpha, limit float32) backend.Array {
	g, u := use(nd(gate), tensor.F32), use(nd(up), tensor.F32)
	sameShape("ClampedSwiGLU", g, u)
	dt := promote(g.dt, u.dt)
	return s.record(g.rows, g.cols, dt, func(a *Arena) *Array {
		c := func(v float32, dt tensor.DType) *Array { return as(a, a.FromFloat32([]float32{v}, 1), dt) }
		gl := a.Minimum(g.x, c(limit, g.dt))
		ul := a.Minimum(a.Maximum(u.x, c(-limit, u.dt)), c(limit, u.dt))
		glu := a.Multiply(gl, a.Sigmoid(a.Multiply(gl, c(alpha, g.dt))))
		return a.Multiply(a.Add(ul, c(1, u.dt)), glu)
	})
}
