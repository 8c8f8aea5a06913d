//go:build cgo

package mlx

import (
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// testFluxOps runs FLUX's ops (ConcatRows, SiLU, Modulate, Gate,
// RoPETable) on both backends, in float32, on odd sizes; the CPU ones are
// checked against their formulas in package cpu.
func testFluxOps(t *testing.T) {
	be, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(25, 3))
	const rows, heads, d = 11, 3, 6
	const cols = heads * d
	x, y := randFloats(rng, rows*cols, 3), randFloats(rng, rows*cols, 1)
	for i := range x[:cols] {
		x[i] += 40 // a row far from zero mean
	}
	shift, scale, g := randFloats(rng, cols, 1), randFloats(rng, cols, 1), randFloats(rng, cols, 1)
	cos, sin := randFloats(rng, rows*d, 1), randFloats(rng, rows*d, 1)
	compareWithCPU(t, be, []opCase{
		{"ConcatRows", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.ConcatRows(s.Input(rows, cols, x), s.Input(1, cols, g), s.Input(rows, cols, y))
		}, 0},
		{"SiLU", func(_ backend.Backend, s backend.Step) backend.Array { return s.SiLU(s.Input(rows, cols, x)) }, 1e-5},
		{"Modulate", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.Modulate(s.Input(rows, cols, x), s.Input(1, cols, shift), s.Input(1, cols, scale), 1e-6)
		}, 1e-5},
		{"Gate", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.Gate(s.Input(rows, cols, y), s.Input(rows, cols, x), s.Input(1, cols, g))
		}, 1e-6},
		{"RoPETable", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.RoPETable(s.Input(rows, cols, x), s.Input(rows, d, cos), s.Input(rows, d, sin))
		}, 1e-6},
	})
}
