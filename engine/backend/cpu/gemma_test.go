package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend/backendtest"
)

// TestGELUTanhGate, TestSoftcap and TestScale check Gemma's elementwise ops against
// their formulas in float64.
func TestGELUTanhGate(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 5, 40
	g, u := randFloats(rng, rows*cols), randFloats(rng, rows*cols)
	g[0], g[1], g[2] = 6, -6, 0
	want := make([]float64, len(g))
	for i := range g {
		x := float64(g[i])
		want[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) * float64(u[i])
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	closeTo(t, "GELUTanhGate", read(t, s, s.GELUTanhGate(s.Input(rows, cols, g), s.Input(rows, cols, u))), want, 1e-6)
}

func TestSoftcap(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	x := []float32{0, 1, -1, 30, -30, 1000, 5, -0.25}
	want := make([]float64, len(x))
	for i, v := range x {
		want[i] = math.Tanh(float64(v)/30) * 30
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	closeTo(t, "Softcap", read(t, s, s.Softcap(s.Input(2, 4, x), 30)), want, 1e-5)
}

func TestScale(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	x := []float32{0, 1, -1, 3.5, 1e-3, -250}
	want := make([]float64, len(x))
	for i, v := range x {
		want[i] = float64(v) * 11.3125
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	closeTo(t, "Scale", read(t, s, s.Scale(s.Input(2, 3, x), 11.3125)), want, 1e-6)
}

// TestSharedKV: attention without k and v reads the rows an earlier
// layer of the step appended (Gemma 4's KV sharing).
func TestSharedKV(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	backendtest.SharedKV(t, b)
}

// TestKVWidths: a KV cache whose layers have different head widths
// (Gemma 4's wider full-attention layers).
func TestKVWidths(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	backendtest.KVWidths(t, b)
}
