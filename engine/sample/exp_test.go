package sample

import (
	"math"
	"testing"
)

func TestExpNeg(t *testing.T) {
	for i := 0; i <= 708000; i++ {
		x := -float64(i) / 1000
		got, want := expNeg(x), math.Exp(x)
		if rel := math.Abs(got-want) / want; !(rel < 1e-8) {
			t.Fatalf("expNeg(%v) = %v, want %v (relative error %g)", x, got, want, rel)
		}
	}
	for _, x := range []float64{-708.5, -1e300, math.Inf(-1), math.NaN()} {
		if got := expNeg(x); got != 0 {
			t.Errorf("expNeg(%v) = %v, want 0", x, got)
		}
	}
	if got := expNeg(0); got != 1 {
		t.Errorf("expNeg(0) = %v, want 1", got)
	}
}
