//go:build cgo

package mlx

import (
	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// CrossAttention runs MLX's scaled dot-product attention without a mask:
// every query row sees every key row.
func (s *step) CrossAttention(q, k, v backend.Array, heads int, scale float32) backend.Array {
	qa, ka, va := use(nd(q), tensor.F32), use(nd(k), tensor.F32), use(nd(v), tensor.F32)
	hd, err := backend.CrossShape(qa, ka, va, heads)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	return s.record(qa.rows, qa.cols, promote(promote(qa.dt, ka.dt), va.dt), func(a *Arena) *Array {
		y := a.Attention(seqHeads(a, qa.x, 0, qa.rows, qa.cols, hd), seqHeads(a, ka.x, 0, ka.rows, ka.cols, hd),
			seqHeads(a, va.x, 0, va.rows, va.cols, hd), scale, false)
		return rowsOf(a, y, qa.rows, qa.cols)
	})
}

// Conv1D builds each output row's receptive field with slices (im2col:
// the input padded with zero rows and viewed as [rows/stride, stride·C],
// so that tap j of output t is row t + j/stride, columns (j mod stride)·C
// on), then runs the weight over it as Linear does.
func (s *step) Conv1D(x backend.Array, w backend.Weight, kernel, stride, pad int) backend.Array {
	m := wt(w)
	in := use(nd(x), m.dt)
	rows, err := backend.ConvShape(in, w, kernel, stride, pad)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	c := in.cols
	// Padded length: every tap's slice of rows rows must fit, and the
	// length must be a multiple of stride for the reshape.
	need := max(in.rows+2*pad, ((kernel-1)/stride+rows)*stride)
	need = (need + stride - 1) / stride * stride
	dt := linearType(s.b.f32, in.dt, m)
	return s.record(rows, m.out, dt, func(a *Arena) *Array {
		parts := []*Array{}
		if pad > 0 {
			parts = append(parts, a.Zeros(in.x.DType(), pad, c))
		}
		parts = append(parts, in.x)
		if tail := need - pad - in.rows; tail > 0 {
			parts = append(parts, a.Zeros(in.x.DType(), tail, c))
		}
		wide := a.Reshape(a.Concatenate(parts, 0), need/stride, stride*c)
		taps := make([]*Array, kernel)
		for j := range kernel {
			r, col := j/stride, (j%stride)*c
			taps[j] = a.Slice(wide, []int{r, col}, []int{r + rows, col + c})
		}
		return linear(a, a.Concatenate(taps, 1), m, s.b.f32)
	})
}
