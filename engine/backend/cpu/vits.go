package cpu

import (
	"math"

	"fusion/engine/backend"
)

// ReLU returns max(x, 0).
func (s *step) ReLU(x backend.Array) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		src, dst := a.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i, v := range src {
			dst[i] = max(v, 0)
		}
	})
	return out
}

// RelAttention runs each (head, query) pair on the pool: the scores of
// the scaled query against every key row plus, inside the window, its
// dot product with the relative key table; their softmax; the weighted
// sum of the value rows plus, inside the window, of the relative value
// table's rows. VITS's sequences are phonemes (hundreds of rows), so the
// rows are used in place.
func (s *step) RelAttention(q, k, v, relK, relV backend.Array, heads int, scale float32) backend.Array {
	qa, ka, va, rk, rv := arr(q), arr(k), arr(v), arr(relK), arr(relV)
	hd, w, err := backend.RelShape(qa, ka, va, rk, rv, heads)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	kern := s.b.k
	n := qa.rows
	out := s.new(n, qa.cols)
	s.b.parallel(heads*n, func(wk, t int) {
		h, i := t%heads, t/heads
		col := h * hd
		buf := s.scratch[wk].floats(n + hd)
		p, qs := buf[:n], buf[n:]
		kern.Scale(qs, qa.row(i)[col:col+hd], scale)
		for j := range n {
			p[j] = kern.Dot(qs, ka.row(j)[col:col+hd])
			if r := j - i + w; r >= 0 && r <= 2*w {
				p[j] += kern.Dot(qs, rk.row(r))
			}
		}
		kern.Softmax(p)
		dst := out.row(i)[col : col+hd]
		clear(dst)
		for j := range n {
			kern.Axpy(p[j], va.row(j)[col:col+hd], dst)
			if r := j - i + w; r >= 0 && r <= 2*w {
				kern.Axpy(p[j], rv.row(r), dst)
			}
		}
	})
	return out
}

// LeakyReLU returns x, or slope·x below zero.
func (s *step) LeakyReLU(x backend.Array, slope float32) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		src, dst := a.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i, v := range src {
			if v < 0 {
				v *= slope
			}
			dst[i] = v
		}
	})
	return out
}

// GatedTanh returns tanh(a)·sigmoid(b).
func (s *step) GatedTanh(x, y backend.Array) backend.Array {
	a, b := arr(x), arr(y)
	sameShape("GatedTanh", a, b)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		ta, tb, dst := a.data[lo*a.cols:hi*a.cols], b.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i := range dst {
			dst[i] = float32(math.Tanh(float64(ta[i])) / (1 + math.Exp(-float64(tb[i]))))
		}
	})
	return out
}
