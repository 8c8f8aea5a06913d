package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// vecSizes hits every tail of the 8- and 16-wide loops and the 32/64
// unrolled ones.
var vecSizes = []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4099}

func TestVectorOpsLevelsAgree(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		for _, n := range vecSizes {
			a, b := randFloats(r, n), randFloats(r, n)
			var mag float64
			for i := range a {
				mag += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if got, want := k.Dot(a, b), genericKernels.Dot(a, b); math.Abs(float64(got-want)) > tolLevel*mag {
				t.Fatalf("%v Dot n=%d: %v, generic %v", l, n, got, want)
			}
			// Axpy may fuse the multiply-add: allow one rounding of the
			// terms. Add, Mul and Scale round once and must be exact.
			y1, y2 := append([]float32(nil), b...), append([]float32(nil), b...)
			k.Axpy(0.75, a, y1)
			genericKernels.Axpy(0.75, a, y2)
			for i := range y1 {
				bound := 0x1p-23 * (math.Abs(float64(b[i])) + math.Abs(0.75*float64(a[i])))
				if d := math.Abs(float64(y1[i] - y2[i])); d > bound {
					t.Fatalf("%v Axpy n=%d i=%d: %v, generic %v", l, n, i, y1[i], y2[i])
				}
			}
			d1, d2 := make([]float32, n), make([]float32, n)
			for _, op := range []struct {
				name string
				f    func(k *Kernels, dst []float32)
			}{
				{"Add", func(k *Kernels, dst []float32) { k.Add(dst, a, b) }},
				{"Mul", func(k *Kernels, dst []float32) { k.Mul(dst, a, b) }},
				{"Scale", func(k *Kernels, dst []float32) { k.Scale(dst, a, 1.7) }},
			} {
				op.f(k, d1)
				op.f(genericKernels, d2)
				for i := range d1 {
					if d1[i] != d2[i] {
						t.Fatalf("%v %s n=%d i=%d: %v, generic %v", l, op.name, n, i, d1[i], d2[i])
					}
				}
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		for _, n := range []int{1, 17, 128, 1000} {
			x, w := randFloats(r, n), randFloats(r, n)
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			rs := 1 / math.Sqrt(ss/float64(n)+1e-6)
			got := make([]float32, n)
			k.RMSNorm(got, x, w, 1e-6)
			for i := range got {
				want := float64(x[i]) * rs * float64(w[i])
				if math.Abs(float64(got[i])-want) > 1e-6*math.Abs(want)+1e-6*math.Abs(float64(w[i])) {
					t.Fatalf("%v n=%d i=%d: %v, want %v", l, n, i, got[i], want)
				}
			}
			k.RMSNorm(x, x, nil, 1e-6) // in place, no weight
			for i := range x {
				if want := got[i] / w[i]; math.Abs(float64(x[i]-want)) > 1e-5*math.Abs(float64(want))+1e-6 {
					t.Fatalf("%v n=%d i=%d in place: %v, want %v", l, n, i, x[i], want)
				}
			}
		}
	}
}

func TestSoftmax(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		testSoftmax(t, r, k)
	}
}

func testSoftmax(t *testing.T, r *rand.Rand, k *Kernels) {
	for _, n := range []int{1, 5, 8, 9, 100, 1000, 1031} {
		x := randFloats(r, n)
		for i := range x {
			x[i] *= 10
		}
		x[0] = float32(math.Inf(-1))
		var m float64 = math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		want := make([]float64, n)
		var sum float64
		for i, v := range x {
			want[i] = math.Exp(float64(v) - m)
			sum += want[i]
		}
		k.Softmax(x)
		for i := range x {
			if w := want[i] / sum; math.Abs(float64(x[i])-w) > 2e-6*w+1e-12 {
				t.Fatalf("%v n=%d i=%d: %v, want %v", k.Level(), n, i, x[i], w)
			}
		}
	}
}

func TestSwiGLU(t *testing.T) {
	r := newRand(t)
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		for _, n := range []int{1, 8, 13, 300} {
			g, u := randFloats(r, n), randFloats(r, n)
			for i := range g {
				g[i] *= 8
			}
			g[0] = -100
			if n > 1 {
				g[1] = 100
			}
			got := make([]float32, n)
			k.SwiGLU(got, g, u)
			for i := range got {
				gi := float64(g[i])
				want := gi / (1 + math.Exp(-gi)) * float64(u[i])
				if math.Abs(float64(got[i])-want) > 1e-6*math.Abs(want)+1e-30 {
					t.Fatalf("%v n=%d i=%d: silu(%v)·%v = %v, want %v", l, n, i, g[i], u[i], got[i], want)
				}
			}
		}
	}
}

// The vector e^x must match expf to within an ulp or so, including the
// edges (0 below the range, +Inf above, NaN for NaN).
func TestExpLevelsAgree(t *testing.T) {
	var xs []float32
	for x := float32(-90); x < 90; x += 0.0123 {
		xs = append(xs, x)
	}
	xs = append(xs, float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, -87.33654, 88.72283, -87.3365, 88.7228)
	for len(xs)%8 != 0 {
		xs = append(xs, 1)
	}
	for _, l := range Levels()[1:] {
		k, _ := ForLevel(l)
		got := append([]float32(nil), xs...)
		k.impl.expSubSum(got, 0)
		for i, x := range xs {
			want := expf(x)
			switch {
			case want != want:
				if got[i] == got[i] {
					t.Fatalf("%v e^%v = %v, want NaN", l, x, got[i])
				}
			case math.IsInf(float64(want), 0) || want == 0:
				if got[i] != want {
					t.Fatalf("%v e^%v = %v, want %v", l, x, got[i], want)
				}
			default:
				if d := math.Abs(float64(got[i]-want)) / float64(want); d > 3e-7 {
					t.Fatalf("%v e^%v = %v, want %v (rel %g)", l, x, got[i], want, d)
				}
			}
		}
	}
}

func TestExpf(t *testing.T) {
	var worst float64
	for x := float32(-87); x < 88.7; x += 0.0137 {
		want := math.Exp(float64(x))
		got := float64(expf(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		worst = max(worst, math.Abs(got-want)/ulp)
	}
	if worst > 2 {
		t.Errorf("expf error %.2f ulp, want ≤ 2", worst)
	}
	t.Logf("expf max error %.2f ulp", worst)
	if expf(-100) != 0 || !math.IsInf(float64(expf(100)), 1) || expf(0) != 1 {
		t.Error("expf edge cases")
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Error("expf(NaN) is not NaN")
	}
}
