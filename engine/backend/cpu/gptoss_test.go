package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// TestClampedSwiGLU checks gpt-oss's activation against its formula in
// float64, on values inside and beyond the limit on both sides.
func TestClampedSwiGLU(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	const rows, cols = 4, 30
	const alpha, limit = 1.702, 7.0
	g, u := randFloats(rng, rows*cols), randFloats(rng, rows*cols)
	for i := range g {
		g[i] *= 6 // a spread that crosses ±limit
		u[i] *= 6
	}
	g[0], u[0], g[1], u[1], g[2], u[2] = 9, -9, -9, 9, 7, 7
	want := make([]float64, len(g))
	for i := range g {
		x := min(float64(g[i]), limit)
		y := min(max(float64(u[i]), -limit), limit)
		want[i] = (y + 1) * x / (1 + math.Exp(-alpha*x))
	}
	s := b.NewStep(context.Background())
	defer s.Close()
	closeTo(t, "ClampedSwiGLU", read(t, s, s.ClampedSwiGLU(s.Input(rows, cols, g), s.Input(rows, cols, u), alpha, limit)), want, 1e-5)
}
