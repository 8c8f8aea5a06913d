package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
)

// LayerNorm normalizes every row, then scales by w and adds bias.
func (s *step) LayerNorm(x backend.Array, w, bias backend.Vector, eps float32) backend.Array {
	a := arr(x)
	wv, ok1 := w.(*vector)
	bv, ok2 := bias.(*vector)
	if !ok1 || !ok2 {
		panic(fmt.Sprintf("cpu: LayerNorm: vectors of another backend (%T, %T)", w, bias))
	}
	if len(wv.v) != a.cols || len(bv.v) != a.cols {
		panic(fmt.Sprintf("cpu: LayerNorm: %d features, weight %d, bias %d", a.cols, len(wv.v), len(bv.v)))
	}
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			layerNorm(out.row(r), a.row(r), wv.v, bv.v, eps)
		}
	})
	return out
}

// layerNorm computes one row; mean and variance are accumulated in
// float64 so that rows with a large mean do not lose the variance.
func layerNorm(dst, x, w, b []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v)
	}
	mean := sum / float64(len(x))
	var sq float64
	for _, v := range x {
		d := float64(v) - mean
		sq += d * d
	}
	inv := float32(1 / math.Sqrt(sq/float64(len(x))+float64(eps)))
	m := float32(mean)
	for i, v := range x {
		dst[i] = (v-m)*inv*w[i] + b[i]
	}
}

// GELU applies x·Φ(x) elementwise, the erf form (kernels.GELU).
func (s *step) GELU(x backend.Array) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		s.b.k.GELU(out.data[lo*a.cols:hi*a.cols], a.data[lo*a.cols:hi*a.cols])
	})
	return out
}

// encoderTask is the attention of one head of one sequence.
type encoderTask struct {
	base, n, head int
}

// EncoderAttention runs softmax(q·kᵀ·scale)·v per sequence and head, each
// task on one worker.
func (s *step) EncoderAttention(q, k, v backend.Array, heads int, scale float32, lens []int) backend.Array {
	qa, ka, va := arr(q), arr(k), arr(v)
	hd, err := backend.EncoderShape(qa, ka, va, heads, lens)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	out := s.new(qa.rows, qa.cols)
	tasks := make([]encoderTask, 0, len(lens)*heads)
	base := 0
	for _, n := range lens {
		for h := range heads {
			tasks = append(tasks, encoderTask{base: base, n: n, head: h})
		}
		base += n
	}
	s.b.parallel(len(tasks), func(w, i int) {
		s.encoderAttend(&s.scratch[w], tasks[i], qa, ka, va, out, hd, scale)
	})
	return out
}

// encoderAttend computes one task as two products on packed matrices:
// the head's keys and values are packed (kernels.PackRows, PackCols),
// the scores S = q·kᵀ of all the sequence's queries come out of one
// product, each row is scaled and softmaxed in place, and S·v is written
// straight into the head's columns of out.
func (s *step) encoderAttend(sc *scratch, t encoderTask, q, k, v, out *array, hd int, scale float32) {
	kern := s.b.k
	n := t.n
	nk, nv := kernels.PackedLen(n, hd), kernels.PackedLen(hd, n)
	buf := sc.floats(nk + nv + n*n)
	keys, vals, scores := buf[:nk], buf[nk:nk+nv], buf[nk+nv:]
	off := func(a *array) []float32 { return a.data[t.base*a.cols+t.head*hd:] }
	kernels.PackRows(keys, off(k), k.cols, n, hd)
	kernels.PackCols(vals, off(v), v.cols, hd, n)
	kern.MulPacked(scores, n, off(q), q.cols, n, keys, n, hd)
	for i := range n {
		p := scores[i*n : (i+1)*n]
		kern.Scale(p, p, scale)
		kern.Softmax(p)
	}
	kern.MulPacked(off(out), out.cols, scores, n, n, vals, hd, n)
}
