package cpu

import (
	"context"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// HeadSlice, HeadConcat and HeadLinear against their formulas on three
// heads: a slice of each head's features, two arrays' heads interleaved,
// and each head's features times its own matrix (with a bias).
func TestHeadOps(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, heads, w, wb, out = 5, 3, 8, 2, 6
	x, y := randFloats(rng, rows*heads*w), randFloats(rng, rows*heads*wb)
	s := b.NewStep(context.Background())
	defer s.Close()
	xa, ya := s.Input(rows, heads*w, x), s.Input(rows, heads*wb, y)

	sliced := read(t, s, s.HeadSlice(xa, heads, 2, 7))
	var want []float64
	for r := range rows {
		for h := range heads {
			for c := 2; c < 7; c++ {
				want = append(want, float64(x[r*heads*w+h*w+c]))
			}
		}
	}
	closeTo(t, "HeadSlice", sliced, want, 0)

	joined := read(t, s, s.HeadConcat(xa, ya, heads))
	want = want[:0]
	for r := range rows {
		for h := range heads {
			for c := range w {
				want = append(want, float64(x[r*heads*w+h*w+c]))
			}
			for c := range wb {
				want = append(want, float64(y[r*heads*wb+h*wb+c]))
			}
		}
	}
	closeTo(t, "HeadConcat", joined, want, 0)

	mats, biases := make([][]float32, heads), make([][]float32, heads)
	ws := make([]backend.Weight, heads)
	for h := range heads {
		mats[h], biases[h] = randFloats(rng, out*w), randFloats(rng, out)
		wt, bt := f32Tensor(mats[h]), f32Tensor(biases[h])
		wt.Shape = []int64{out, w}
		var err error
		if ws[h], err = b.Weight(backend.WeightData{Name: "head", Format: backend.Dense, Out: out, In: w, Data: wt, Bias: &bt}); err != nil {
			t.Fatal(err)
		}
	}
	got := read(t, s, s.HeadLinear(xa, ws))
	want = want[:0]
	for r := range rows {
		for h := range heads {
			for o := range out {
				acc := float64(biases[h][o])
				for c := range w {
					acc += float64(x[r*heads*w+h*w+c]) * float64(mats[h][o*w+c])
				}
				want = append(want, acc)
			}
		}
	}
	closeTo(t, "HeadLinear", got, want, 1e-5)
}
