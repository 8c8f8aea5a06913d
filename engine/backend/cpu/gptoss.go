package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
)

// SinkAttention is Attention (window 0) or WindowAttention with a learned
// sink logit per query head in every softmax.
func (s *step) SinkAttention(layer int, q, k, v backend.Array, scale float32, window int, sinks backend.Vector, b *backend.Batch) backend.Array {
	if window < 0 {
		panic(fmt.Sprintf("cpu: SinkAttention: window %d", window))
	}
	return s.attention(layer, q, k, v, scale, window, sinks.(*vector).v, b)
}

// sinkSoftmax is the softmax of [x…, sink] without the sink's own share,
// in place: x_j = e^{x_j−m} / (Σ_i e^{x_i−m} + e^{sink−m}), m the largest
// of them all; in float32, as mlx's precise softmax is for float32.
func sinkSoftmax(x []float32, sink float32) {
	m := sink
	for _, v := range x {
		m = max(m, v)
	}
	sum := float32(math.Exp(float64(sink - m)))
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
}

// ClampedSwiGLU returns gpt-oss's gated activation: with g = min(gate,
// limit) and u = clip(up, −limit, limit), (u + 1)·g·sigmoid(alpha·g).
func (s *step) ClampedSwiGLU(gate, up backend.Array, alpha, limit float32) backend.Array {
	return s.gated("ClampedSwiGLU", gate, up, func(g, u float32) float32 { return clampedSwiGLU(g, u, alpha, limit) })
}

// clampedSwiGLU is one element of ClampedSwiGLU, in float32 as mlx-lm's
// swiglu_oai computes float32 activations.
func clampedSwiGLU(gate, up, alpha, limit float32) float32 {
	g := min(gate, limit)
	u := min(max(up, -limit), limit)
	sig := float32(1 / (1 + math.Exp(float64(-alpha*g))))
	return (u + 1) * (g * sig)
}
