package cpu

import (
	"context"
	"math"
	"testing"
)

// TestRNNOps checks LSTMCell, Sigmoid and ComplexAbs against their
// formulas, written out here independently of the kernels.
func TestRNNOps(t *testing.T) {
	b := New(Options{Threads: 2})
	defer b.Close()
	s := b.NewStep(context.Background())
	defer s.Close()
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

	// Two rows, H = 2: gates i, f, g, o of two units each.
	gates := []float32{
		0.5, -1, 2, 0.1, -0.3, 0.7, 1.5, -2,
		-4, 3, 0, 0.2, 1, -1, -0.6, 0.9,
	}
	c := []float32{0.25, -1.5, 2, 0}
	want := make([]float64, 8)
	for r := range 2 {
		for j := range 2 {
			g := func(k int) float64 { return float64(gates[r*8+k*2+j]) }
			cn := sig(g(1))*float64(c[r*2+j]) + sig(g(0))*math.Tanh(g(2))
			want[r*4+j] = sig(g(3)) * math.Tanh(cn)
			want[r*4+2+j] = cn
		}
	}
	closeTo(t, "LSTMCell", read(t, s, s.LSTMCell(s.Input(2, 8, gates), s.Input(2, 2, c))), want, 1e-6)

	x := []float32{-30, -1, 0, 0.5, 4, 40}
	want = make([]float64, len(x))
	for i, v := range x {
		want[i] = sig(float64(v))
	}
	closeTo(t, "Sigmoid", read(t, s, s.Sigmoid(s.Input(2, 3, x))), want, 1e-7)

	// [re0 re1 re2 | im0 im1 im2] per row.
	z := []float32{3, 0, -1, 4, 0, 1, 0.5, -2, 0, 0, 0, 0}
	want = []float64{5, 0, math.Sqrt2, 0.5, 2, 0}
	closeTo(t, "ComplexAbs", read(t, s, s.ComplexAbs(s.Input(2, 6, z))), want, 1e-6)
}

// TestRNNShapes wants a panic on widths that do not fit.
func TestRNNShapes(t *testing.T) {
	b := New(Options{Threads: 1})
	defer b.Close()
	s := b.NewStep(context.Background())
	defer s.Close()
	for name, f := range map[string]func(){
		"LSTMCell":   func() { s.LSTMCell(s.Input(1, 7, make([]float32, 7)), s.Input(1, 2, make([]float32, 2))) },
		"ComplexAbs": func() { s.ComplexAbs(s.Input(1, 3, make([]float32, 3))) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
