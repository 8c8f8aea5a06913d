package fft

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"
)

// naive is the DFT by its definition, with angles reduced exactly (jk mod
// n) so its own error stays near float64 rounding.
func naive(x []complex128) []complex128 {
	n := len(x)
	out := make([]complex128, n)
	for k := range n {
		var s complex128
		for j := range n {
			a := -2 * math.Pi * float64(j*k%n) / float64(n)
			s += x[j] * complex(math.Cos(a), math.Sin(a))
		}
		out[k] = s
	}
	return out
}

var lengths = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16, 25, 27, 30, 49, 64, 97, 100, 128, 200, 400, 401, 512, 800, 1000, 1024}

// TestForwardMatchesDFT: every length, random complex input, against the
// DFT formula; the bound scales with log n and the input's size.
func TestForwardMatchesDFT(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range lengths {
		p, err := NewPlan(n)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]complex128, n)
		for i := range x {
			x[i] = complex(r.NormFloat64(), r.NormFloat64())
		}
		got := make([]complex128, n)
		p.Forward(got, x)
		want := naive(x)
		var worst float64
		for k := range got {
			worst = max(worst, cmplx.Abs(got[k]-want[k]))
		}
		if bound := 1e-13 * float64(n) * math.Sqrt(float64(n)); worst > bound {
			t.Errorf("n=%d (factors %v): max |Δ| %.3g > %.3g", n, p.factors, worst, bound)
		}
	}
}

func TestRealMatchesDFT(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range lengths {
		p, err := NewReal(n)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float64, n)
		cx := make([]complex128, n)
		for i := range x {
			x[i] = r.NormFloat64()
			cx[i] = complex(x[i], 0)
		}
		got := make([]complex128, n/2+1)
		p.Forward(got, x)
		want := naive(cx)
		var worst float64
		for k := range got {
			worst = max(worst, cmplx.Abs(got[k]-want[k]))
		}
		if bound := 1e-13 * float64(n) * math.Sqrt(float64(n)); worst > bound {
			t.Errorf("n=%d: max |Δ| %.3g > %.3g", n, worst, bound)
		}
	}
}

// TestKnownTransforms: an impulse is flat, a cosine at bin 3 of 400 is two
// spikes of n/2.
func TestKnownTransforms(t *testing.T) {
	p, _ := NewReal(400)
	x := make([]float64, 400)
	x[0] = 1
	out := make([]complex128, 201)
	p.Forward(out, x)
	for k, v := range out {
		if cmplx.Abs(v-1) > 1e-12 {
			t.Fatalf("impulse: bin %d = %v", k, v)
		}
	}
	for i := range x {
		x[i] = math.Cos(2 * math.Pi * 3 * float64(i) / 400)
	}
	p.Forward(out, x)
	for k, v := range out {
		want := 0.0
		if k == 3 {
			want = 200
		}
		if cmplx.Abs(v-complex(want, 0)) > 1e-10 {
			t.Fatalf("cosine: bin %d = %v, want %v", k, v, want)
		}
	}
	if _, err := NewPlan(0); err == nil {
		t.Fatal("NewPlan(0) accepted")
	}
}
