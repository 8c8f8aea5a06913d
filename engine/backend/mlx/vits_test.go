//go:build cgo

package mlx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// testVITSOps runs ReLU, LeakyReLU, GatedTanh and RelAttention on both backends (the CPU ones
// are checked against their formulas in package cpu), for sequences
// shorter and longer than the window.
func testVITSOps(t *testing.T) {
	be, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(51, 52))
	const heads, hd, w = 2, 8, 4
	const cols, width = heads * hd, 2*w + 1
	scale := float32(1 / math.Sqrt(hd))
	x := randFloats(rng, 5*cols, 1)
	y := randFloats(rng, 5*cols, 2)
	ops := []opCase{
		{"ReLU", func(_ backend.Backend, s backend.Step) backend.Array { return s.ReLU(s.Input(5, cols, x)) }, 0},
		{"LeakyReLU", func(_ backend.Backend, s backend.Step) backend.Array { return s.LeakyReLU(s.Input(5, cols, x), 0.1) }, 1e-7},
		{"GatedTanh", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.GatedTanh(s.Input(5, cols, x), s.Input(5, cols, y))
		}, 1e-6},
	}
	for _, n := range []int{1, 3, 12} {
		q, k, v := randFloats(rng, n*cols, 1), randFloats(rng, n*cols, 1), randFloats(rng, n*cols, 1)
		rk, rv := randFloats(rng, width*hd, 1), randFloats(rng, width*hd, 1)
		ops = append(ops, opCase{fmt.Sprintf("RelAttention/%d", n), func(_ backend.Backend, s backend.Step) backend.Array {
			return s.RelAttention(s.Input(n, cols, q), s.Input(n, cols, k), s.Input(n, cols, v), s.Input(width, hd, rk), s.Input(width, hd, rv), heads, scale)
		}, 1e-5})
	}
	compareWithCPU(t, be, ops)
}
