//go:build cgo

package mlx

import (
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// testRNNOps runs LSTMCell, Sigmoid and ComplexAbs on both backends (the
// CPU ones are checked against their formulas in package cpu).
func testRNNOps(t *testing.T) {
	be, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(61, 62))
	const rows, h = 3, 16
	gates := randFloats(rng, rows*4*h, 2)
	c := randFloats(rng, rows*h, 1)
	x := randFloats(rng, rows*2*h, 3)
	compareWithCPU(t, be, []opCase{
		{"LSTMCell", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.LSTMCell(s.Input(rows, 4*h, gates), s.Input(rows, h, c))
		}, 1e-6},
		{"Sigmoid", func(_ backend.Backend, s backend.Step) backend.Array { return s.Sigmoid(s.Input(rows, 2*h, x)) }, 1e-6},
		{"ComplexAbs", func(_ backend.Backend, s backend.Step) backend.Array { return s.ComplexAbs(s.Input(rows, 2*h, x)) }, 1e-6},
	})
}
