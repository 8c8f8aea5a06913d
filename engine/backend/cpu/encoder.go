package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
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

// GELU applies x·Φ(x) elementwise with the exact erf.
func (s *step) GELU(x backend.Array) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		src, dst := a.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i, v := range src {
			dst[i] = gelu(v)
		}
	})
	return out
}

func gelu(v float32) float32 {
	return float32(0.5 * float64(v) * (1 + math.Erf(float64(v)/math.Sqrt2)))
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

// encoderAttend computes one task: the head's keys and values are copied
// into contiguous matrices, then for each query the scores over all keys,
// their softmax, and the weighted sum of the values.
func (s *step) encoderAttend(sc *scratch, t encoderTask, q, k, v, out *array, hd int, scale float32) {
	kern := s.b.k
	n := t.n
	buf := sc.floats(2*n*hd + n + hd)
	keys, buf := buf[:n*hd], buf[n*hd:]
	vals, buf := buf[:n*hd], buf[n*hd:]
	p, qs := buf[:n], buf[n:n+hd]
	col := t.head * hd
	for j := range n {
		copy(keys[j*hd:(j+1)*hd], k.row(t.base + j)[col:col+hd])
		copy(vals[j*hd:(j+1)*hd], v.row(t.base + j)[col:col+hd])
	}
	for i := range n {
		kern.Scale(qs, q.row(t.base + i)[col:col+hd], scale)
		for j := range n {
			p[j] = kern.Dot(qs, keys[j*hd:(j+1)*hd])
		}
		kern.Softmax(p)
		dst := out.row(t.base + i)[col : col+hd]
		clear(dst)
		for j := range n {
			kern.Axpy(p[j], vals[j*hd:(j+1)*hd], dst)
		}
	}
}
