//go:build cgo

package mlx

import (
	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// ReLU is maximum(x, 0).
func (s *step) ReLU(x backend.Array) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array {
		return a.Maximum(in.x, as(a, a.FromFloat32([]float32{0}, 1), in.dt))
	})
}

// RelAttention builds the scores of all heads as one matmul, adds the
// relative-key logits (q·relKᵀ, [T, 2w+1] per head) moved to their
// absolute positions with one take (a zero column stands for the offsets
// outside the window), takes the softmax, and adds to p·v the relative
// values: p gathered back to [T, 2w+1] the same way, times relV.
func (s *step) RelAttention(q, k, v, relK, relV backend.Array, heads int, scale float32) backend.Array {
	qa, ka, va := use(nd(q), tensor.F32), use(nd(k), tensor.F32), use(nd(v), tensor.F32)
	rk, rv := use(nd(relK), tensor.F32), use(nd(relV), tensor.F32)
	hd, w, err := backend.RelShape(qa, ka, va, rk, rv, heads)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	n, width := qa.rows, 2*w+1
	// toAbs[i·n+j] indexes [n, width+1] rows: the offset j−i+w, or the
	// zero column. toRel[i·width+r] indexes [n, n+1] rows: key i+r−w, or
	// the zero column.
	toAbs := make([]int32, n*n)
	toRel := make([]int32, n*width)
	for i := range n {
		for j := range n {
			r := j - i + w
			if r < 0 || r >= width {
				r = width
			}
			toAbs[i*n+j] = int32(i*(width+1) + r)
		}
		for r := range width {
			j := i + r - w
			if j < 0 || j >= n {
				j = n
			}
			toRel[i*width+r] = int32(i*(n+1) + j)
		}
	}
	return s.record(n, qa.cols, tensor.F32, func(a *Arena) *Array {
		f := func(x *Array) *Array { return as(a, x, tensor.F32) }
		qh := a.Multiply(seqHeads(a, f(qa.x), 0, n, qa.cols, hd), a.FromFloat32([]float32{scale}, 1))
		kh := seqHeads(a, f(ka.x), 0, n, ka.cols, hd)
		vh := seqHeads(a, f(va.x), 0, n, va.cols, hd)
		scores := a.Matmul(qh, a.Transpose(kh, 0, 1, 3, 2)) // [1, H, n, n]
		rel := a.Matmul(qh, a.Transpose(f(rk.x), 1, 0))     // [1, H, n, width]
		rel = a.Concatenate([]*Array{rel, a.Zeros(tensor.F32, 1, heads, n, 1)}, 3)
		rel = a.Take(a.Reshape(rel, 1, heads, n*(width+1)), a.FromInt32(toAbs, n*n), 2)
		p := a.Softmax(a.Add(scores, a.Reshape(rel, 1, heads, n, n)), 3)
		o := a.Matmul(p, vh)
		pr := a.Concatenate([]*Array{p, a.Zeros(tensor.F32, 1, heads, n, 1)}, 3)
		pr = a.Take(a.Reshape(pr, 1, heads, n*(n+1)), a.FromInt32(toRel, n*width), 2)
		o = a.Add(o, a.Matmul(a.Reshape(pr, 1, heads, n, width), f(rv.x)))
		return rowsOf(a, o, n, qa.cols)
	})
}

// LeakyReLU is maximum(x, slope·x) (slope < 1), or minimum for slope > 1.
func (s *step) LeakyReLU(x backend.Array, slope float32) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array {
		scaled := a.Multiply(in.x, as(a, a.FromFloat32([]float32{slope}, 1), in.dt))
		if slope > 1 {
			return a.Minimum(in.x, scaled)
		}
		return a.Maximum(in.x, scaled)
	})
}

// GatedTanh is tanh(a)·sigmoid(b).
func (s *step) GatedTanh(x, y backend.Array) backend.Array {
	a, b := use(nd(x), tensor.F32), use(nd(y), tensor.F32)
	if a.rows != b.rows || a.cols != b.cols {
		panic("mlx: GatedTanh: shapes differ")
	}
	return s.record(a.rows, a.cols, promote(a.dt, b.dt), func(ar *Arena) *Array {
		return ar.Multiply(ar.Tanh(a.x), ar.Sigmoid(b.x))
	})
}
