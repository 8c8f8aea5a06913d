package kernels

import (
	"math"
	"testing"
)

// TestGELU compares every level's GELU with x·Φ(x) in float64 over a
// dense grid of [-12, 12], the extremes and odd lengths (tails), and
// checks that an element's result does not depend on where it sits.
func TestGELU(t *testing.T) {
	var x []float32
	for v := -12.0; v <= 12; v += 1.0 / 1024 {
		x = append(x, float32(v))
	}
	x = append(x, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 50, -50, 3e38, -3e38, float32(math.Inf(1)))
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		var worst float64
		for _, n := range []int{len(x), 1, 15, 17, 33} {
			got := make([]float32, n)
			k.GELU(got, x[:n])
			for i, v := range got {
				xv := float64(x[i])
				want := 0.5 * xv * (1 + math.Erf(xv/math.Sqrt2))
				if float64(v) == want {
					continue
				}
				d := math.Abs(float64(v) - want)
				if !(d <= 3e-7*max(1, math.Abs(xv))) {
					t.Fatalf("%v: GELU(%v) = %v, want %v", l, xv, v, want)
				}
				worst = max(worst, d/max(1, math.Abs(xv)))
			}
		}
		// In place, and shifted by one: the same bits for each element.
		a := append([]float32(nil), x...)
		k.GELU(a, a)
		b := make([]float32, len(x)-1)
		k.GELU(b, x[1:])
		for i := range b {
			if a[i+1] != b[i] {
				t.Fatalf("%v: GELU(%v) is %v at %d and %v at %d", l, x[i+1], a[i+1], i+1, b[i], i)
			}
		}
		t.Logf("%v: max |GELU-ref|/max(1,|x|) = %.2g", l, worst)
	}
}
