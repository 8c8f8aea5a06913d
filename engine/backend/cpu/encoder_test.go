package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

func TestLayerNorm(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 7, 48
	w, bias, x := randFloats(rng, cols), randFloats(rng, cols), randFloats(rng, rows*cols)
	for i := range x[:cols] { // a row far from zero mean: the variance must survive
		x[i] = 1000 + x[i]
	}
	wv, err := b.Vector(backend.VectorData{Name: "w", Data: f32Tensor(w)})
	if err != nil {
		t.Fatal(err)
	}
	bv, err := b.Vector(backend.VectorData{Name: "b", Data: f32Tensor(bias)})
	if err != nil {
		t.Fatal(err)
	}
	const eps = 1e-12
	want := make([]float64, rows*cols)
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		var mean, v float64
		for _, e := range row {
			mean += float64(e)
		}
		mean /= cols
		for _, e := range row {
			v += (float64(e) - mean) * (float64(e) - mean)
		}
		v /= cols
		for i, e := range row {
			want[r*cols+i] = (float64(e)-mean)/math.Sqrt(v+eps)*float64(w[i]) + float64(bias[i])
		}
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	got := read(t, s, s.LayerNorm(s.Input(rows, cols, x), wv, bv, eps))
	closeTo(t, "LayerNorm", got, want, 1e-4)
}

func TestGELU(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	// x·Φ(x) at points where Φ is tabulated.
	x := []float32{0, 1, -1, 2, -2, 0.5, -3, 6}
	want := []float64{0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416, -0.04550026389635842,
		0.3457312306447303, -0.004049694, 5.999999994}
	s := b.NewStep(context.Background())
	defer s.Close()
	closeTo(t, "GELU", read(t, s, s.GELU(s.Input(2, 4, x))), want, 1e-6)
}

// TestEncoderAttention compares ragged bidirectional attention with the
// formula in float64, and checks that a sequence's rows are the same
// alone as beside others (no attention crosses sequences).
func TestEncoderAttention(t *testing.T) {
	b := New(Options{Threads: 3})
	defer b.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	const heads, hd = 4, 8
	const cols = heads * hd
	lens := []int{3, 1, 70}
	rows := 0
	for _, n := range lens {
		rows += n
	}
	q, k, v := randFloats(rng, rows*cols), randFloats(rng, rows*cols), randFloats(rng, rows*cols)
	scale := float32(1 / math.Sqrt(hd))
	want := make([]float64, rows*cols)
	base := 0
	for _, n := range lens {
		for h := range heads {
			for i := range n {
				scores := make([]float64, n)
				top := math.Inf(-1)
				for j := range n {
					var d float64
					for c := range hd {
						d += float64(q[(base+i)*cols+h*hd+c]) * float64(k[(base+j)*cols+h*hd+c])
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
					for j := range n {
						acc += scores[j] / sum * float64(v[(base+j)*cols+h*hd+c])
					}
					want[(base+i)*cols+h*hd+c] = acc
				}
			}
		}
		base += n
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	in := func(x []float32, r0, r1 int) backend.Array { return s.Input(r1-r0, cols, x[r0*cols:r1*cols]) }
	got := read(t, s, s.EncoderAttention(in(q, 0, rows), in(k, 0, rows), in(v, 0, rows), heads, scale, lens))
	closeTo(t, "EncoderAttention", got, want, 1e-4)

	// The last sequence alone gives the same values, bit for bit.
	r0 := lens[0] + lens[1]
	alone := read(t, s, s.EncoderAttention(in(q, r0, rows), in(k, r0, rows), in(v, r0, rows), heads, scale, lens[2:]))
	for i, x := range alone {
		if x != got[r0*cols+i] {
			t.Fatalf("value %d of the last sequence is %v alone, %v in the batch", i, x, got[r0*cols+i])
		}
	}
}
