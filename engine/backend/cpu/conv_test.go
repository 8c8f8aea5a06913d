package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// TestConv1D compares Conv1D with the convolution formula in float64 for
// Whisper's two stem shapes (kernel 3, pad 1, stride 1 and 2) and a few
// edge cases (odd length at stride 2, no padding, kernel 1).
func TestConv1D(t *testing.T) {
	b := New(Options{Threads: 3})
	defer b.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	cases := []struct{ rows, c, out, kernel, stride, pad int }{
		{20, 6, 5, 3, 1, 1},
		{20, 6, 5, 3, 2, 1},
		{21, 6, 5, 3, 2, 1},
		{9, 4, 3, 3, 1, 0},
		{9, 4, 3, 5, 3, 2},
		{4, 2, 3, 1, 1, 0},
	}
	for _, c := range cases {
		x := randFloats(rng, c.rows*c.c)
		w, bias := randFloats(rng, c.out*c.kernel*c.c), randFloats(rng, c.out)
		wt, bt := f32Tensor(w), f32Tensor(bias)
		wt.Shape = []int64{int64(c.out), int64(c.kernel * c.c)}
		weight, err := b.Weight(backend.WeightData{Name: "conv", Format: backend.Dense, Out: c.out, In: c.kernel * c.c, Data: wt, Bias: &bt})
		if err != nil {
			t.Fatal(err)
		}
		rows := (c.rows+2*c.pad-c.kernel)/c.stride + 1
		want := make([]float64, rows*c.out)
		for t := range rows {
			for o := range c.out {
				acc := float64(bias[o])
				for j := range c.kernel {
					src := t*c.stride + j - c.pad
					if src < 0 || src >= c.rows {
						continue
					}
					for ch := range c.c {
						acc += float64(x[src*c.c+ch]) * float64(w[o*c.kernel*c.c+j*c.c+ch])
					}
				}
				want[t*c.out+o] = acc
			}
		}
		s := b.NewStep(context.Background())
		y := s.Conv1D(s.Input(c.rows, c.c, x), weight, c.kernel, c.stride, c.pad)
		if y.Rows() != rows || y.Cols() != c.out {
			t.Fatalf("%+v: output [%d, %d], want [%d, %d]", c, y.Rows(), y.Cols(), rows, c.out)
		}
		closeTo(t, "Conv1D", read(t, s, y), want, 1e-4)
		s.Close()
	}
}

// TestCrossAttention compares unmasked attention of q rows over a
// different number of key rows with the formula in float64, for a few
// queries (used in place) and for many (gathered into matrices).
func TestCrossAttention(t *testing.T) {
	for _, nq := range []int{1, 4, crossMatrixRows, 40} {
		testCrossAttention(t, nq)
	}
}

func testCrossAttention(t *testing.T, nq int) {
	b := New(Options{Threads: 3})
	defer b.Close()
	rng := rand.New(rand.NewPCG(9, 10))
	const heads, hd, nk = 3, 8, 37
	const cols = heads * hd
	q, k, v := randFloats(rng, nq*cols), randFloats(rng, nk*cols), randFloats(rng, nk*cols)
	scale := float32(1 / math.Sqrt(hd))
	want := make([]float64, nq*cols)
	for h := range heads {
		for i := range nq {
			scores := make([]float64, nk)
			top := math.Inf(-1)
			for j := range nk {
				var d float64
				for c := range hd {
					d += float64(q[i*cols+h*hd+c]) * float64(k[j*cols+h*hd+c])
				}
				scores[j] = d * float64(scale)
				top = max(top, scores[j])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - top)
				sum += scores[j]
			}
			for c := range hd {
				var acc float64
				for j := range nk {
					acc += scores[j] / sum * float64(v[j*cols+h*hd+c])
				}
				want[i*cols+h*hd+c] = acc
			}
		}
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	got := read(t, s, s.CrossAttention(s.Input(nq, cols, q), s.Input(nk, cols, k), s.Input(nk, cols, v), heads, scale))
	closeTo(t, "CrossAttention", got, want, 1e-4)
}
