package cpu

import (
	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
)

// CrossAttention runs softmax(q·kᵀ·scale)·v per head as two matrix
// products on the pool (scores = q_h·k_hᵀ, then out_h = p·v_h), every
// query over every key: one call per head instead of one small kernel
// call per query–key pair, which matters for Whisper's 1500-row windows
// (and under the race detector, which instruments every call).
func (s *step) CrossAttention(q, k, v backend.Array, heads int, scale float32) backend.Array {
	qa, ka, va := arr(q), arr(k), arr(v)
	hd, err := backend.CrossShape(qa, ka, va, heads)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	nq, nk := qa.rows, ka.rows
	out := s.new(nq, qa.cols)
	if nq < crossMatrixRows {
		s.crossFew(qa, ka, va, out, heads, hd, scale)
		return out
	}
	qh := make([]float32, nq*hd)
	kh := make([]float32, nk*hd)
	vt := make([]float32, hd*nk) // v_h transposed: [hd, nk]
	scores := make([]float32, nq*nk)
	oh := make([]float32, nq*hd)
	for h := range heads {
		col := h * hd
		for i := range nq {
			s.b.k.Scale(qh[i*hd:(i+1)*hd], qa.row(i)[col:col+hd], scale)
		}
		for j := range nk {
			copy(kh[j*hd:(j+1)*hd], ka.row(j)[col:col+hd])
			for c, x := range va.row(j)[col : col+hd] {
				vt[c*nk+j] = x
			}
		}
		kw, err := kernels.NewF32(nk, hd, kh)
		if err != nil {
			panic("cpu: CrossAttention: " + err.Error())
		}
		s.matmul(scores, qh, nq, kw)
		s.b.parallelRows(nq, elementwiseRows(nk), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				s.b.k.Softmax(scores[i*nk : (i+1)*nk])
			}
		})
		vw, err := kernels.NewF32(hd, nk, vt)
		if err != nil {
			panic("cpu: CrossAttention: " + err.Error())
		}
		s.matmul(oh, scores, nq, vw)
		for i := range nq {
			copy(out.row(i)[col:col+hd], oh[i*hd:(i+1)*hd])
		}
	}
	return out
}

// crossMatrixRows is the fewest queries for which CrossAttention
// gathers each head's keys and values into matrices; a decoder step's
// one query uses them in place.
const crossMatrixRows = 16

// crossFew is CrossAttention for a few queries: per head, the scores of
// each query against every key row in place, their softmax, and the
// weighted sum of the value rows.
func (s *step) crossFew(q, k, v, out *array, heads, hd int, scale float32) {
	kern := s.b.k
	nk := k.rows
	s.b.parallel(heads*q.rows, func(w, t int) {
		h, i := t%heads, t/heads
		col := h * hd
		buf := s.scratch[w].floats(nk + hd)
		p, qs := buf[:nk], buf[nk:]
		kern.Scale(qs, q.row(i)[col:col+hd], scale)
		for j := range nk {
			p[j] = kern.Dot(qs, k.row(j)[col:col+hd])
		}
		kern.Softmax(p)
		dst := out.row(i)[col : col+hd]
		clear(dst)
		for j := range nk {
			kern.Axpy(p[j], v.row(j)[col:col+hd], dst)
		}
	})
}

// matmul is dst = x·wᵀ for rows rows of x, in the chunks Linear uses.
func (s *step) matmul(dst, x []float32, rows int, w kernels.Weights) {
	in, o := w.Cols(), w.Rows()
	for r := 0; r < rows; r += linearRows {
		n := min(linearRows, rows-r)
		s.b.pool.MatMul(dst[r*o:(r+n)*o], x[r*in:(r+n)*in], n, w)
	}
}

// Conv1D gathers each output row's receptive field into one row (kernel
// input rows side by side, zeros past the ends: im2col), then runs the
// weight over it as a Linear.
func (s *step) Conv1D(x backend.Array, w backend.Weight, kernel, stride, pad int) backend.Array {
	a := arr(x)
	rows, err := backend.ConvShape(a, w, kernel, stride, pad)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	c := a.cols
	col := s.new(rows, kernel*c)
	s.b.parallelRows(rows, elementwiseRows(kernel*c), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			dst := col.row(t)
			for j := range kernel {
				src := t*stride + j - pad
				if src < 0 || src >= a.rows {
					clear(dst[j*c : (j+1)*c])
				} else {
					copy(dst[j*c:(j+1)*c], a.row(src))
				}
			}
		}
	})
	return s.Linear(col, w)
}
