package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestReLU checks max(x, 0) on a few values, zero and signs included.
func TestReLU(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	s := b.NewStep(context.Background())
	defer s.Close()
	got := read(t, s, s.ReLU(s.Input(2, 3, []float32{-1, 0, 2.5, -0.25, 7, float32(math.Inf(-1))})))
	closeTo(t, "ReLU", got, []float64{0, 0, 2.5, 0, 7, 0}, 0)
}

// TestRelAttention compares relative-position attention with its formula
// in float64 (VITS's attentions.py: scores with relative keys, outputs
// with relative values, inside the window), for sequences shorter and
// longer than the window.
func TestRelAttention(t *testing.T) {
	b := New(Options{Threads: 3})
	defer b.Close()
	rng := rand.New(rand.NewPCG(41, 42))
	const heads, hd, w = 2, 8, 4
	const cols, width = heads * hd, 2*w + 1
	for _, n := range []int{1, 3, 12} {
		q, k, v := randFloats(rng, n*cols), randFloats(rng, n*cols), randFloats(rng, n*cols)
		rk, rv := randFloats(rng, width*hd), randFloats(rng, width*hd)
		scale := float32(1 / math.Sqrt(hd))
		want := make([]float64, n*cols)
		for h := range heads {
			for i := range n {
				p := make([]float64, n)
				m := math.Inf(-1)
				for j := range n {
					var acc float64
					for c := range hd {
						qs := float64(q[i*cols+h*hd+c] * scale)
						acc += qs * float64(k[j*cols+h*hd+c])
						if r := j - i + w; r >= 0 && r < width {
							acc += qs * float64(rk[r*hd+c])
						}
					}
					p[j] = acc
					m = max(m, acc)
				}
				var sum float64
				for j := range p {
					p[j] = math.Exp(p[j] - m)
					sum += p[j]
				}
				for j := range n {
					for c := range hd {
						x := float64(v[j*cols+h*hd+c])
						if r := j - i + w; r >= 0 && r < width {
							x += float64(rv[r*hd+c])
						}
						want[i*cols+h*hd+c] += p[j] / sum * x
					}
				}
			}
		}
		s := b.NewStep(context.Background())
		y := s.RelAttention(s.Input(n, cols, q), s.Input(n, cols, k), s.Input(n, cols, v), s.Input(width, hd, rk), s.Input(width, hd, rv), heads, scale)
		closeTo(t, "RelAttention", read(t, s, y), want, 1e-5)
		s.Close()
	}
}

// TestLeakyReLUAndGatedTanh checks both against their formulas.
func TestLeakyReLUAndGatedTanh(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	s := b.NewStep(context.Background())
	defer s.Close()
	x := []float32{-2, -0.5, 0, 0.5, 3, -10}
	y := []float32{1, -1, 0.25, 4, -3, 0}
	want := make([]float64, len(x))
	for i, v := range x {
		want[i] = float64(v)
		if v < 0 {
			want[i] = 0.1 * float64(v)
		}
	}
	closeTo(t, "LeakyReLU", read(t, s, s.LeakyReLU(s.Input(2, 3, x), 0.1)), want, 1e-7)
	for i := range x {
		want[i] = math.Tanh(float64(x[i])) / (1 + math.Exp(-float64(y[i])))
	}
	closeTo(t, "GatedTanh", read(t, s, s.GatedTanh(s.Input(2, 3, x), s.Input(2, 3, y))), want, 1e-6)
}
