package kernels

import (
	"math"
	"testing"
)

// Every level quantizes activations exactly as quantizeQ8Generic, and that
// is round-to-nearest with ties away from zero at scale amax/127.
func TestQuantizeQ8LevelsExact(t *testing.T) {
	r := newRand(t)
	const blocks = 64
	x := make([]float32, blocks*q8Block)
	for b := range blocks {
		xs := x[b*q8Block : (b+1)*q8Block]
		switch b % 8 {
		case 0: // all zero
		case 1: // one non-zero value
			xs[b%q8Block] = -3.5
		case 2: // exact ties: amax 127 makes id 1, so v·id = v
			for i := range xs {
				xs[i] = float32(i) - 15.5
			}
			xs[31] = 127
		case 3: // negative ties
			for i := range xs {
				xs[i] = -float32(i) - 0.5
			}
			xs[0] = -127
		case 4: // tiny values
			for i := range xs {
				xs[i] = float32(r.NormFloat64()) * 1e-30
			}
		default:
			scale := math.Pow(10, float64(b%8-5))
			for i := range xs {
				xs[i] = float32(r.NormFloat64() * scale)
			}
		}
	}
	want := q8Row{q: make([]int8, len(x)), d: make([]float32, blocks), s: make([]float32, blocks)}
	quantizeQ8Generic(want, x)
	// The reference itself: ties away from zero, scale amax/127.
	if want.q[2*q8Block+0] != -16 || want.q[2*q8Block+16] != 1 || want.q[3*q8Block+1] != -2 || want.d[0] != 0 {
		t.Fatalf("generic quantizer: ties give %d, %d, %d; zero block scale %v",
			want.q[2*q8Block], want.q[2*q8Block+16], want.q[3*q8Block+1], want.d[0])
	}
	for _, l := range Levels() {
		k, _ := ForLevel(l)
		got := q8Row{q: make([]int8, len(x)), d: make([]float32, blocks), s: make([]float32, blocks)}
		for i := range got.q {
			got.q[i] = 99 // a zero block must be written, not left
		}
		k.impl.quantizeQ8(got, x)
		for i := range got.q {
			if got.q[i] != want.q[i] {
				t.Fatalf("%v: q[%d] = %d, want %d (x %v)", l, i, got.q[i], want.q[i], x[i])
			}
		}
		for b := range blocks {
			if math.Float32bits(got.d[b]) != math.Float32bits(want.d[b]) || math.Float32bits(got.s[b]) != math.Float32bits(want.s[b]) {
				t.Fatalf("%v: block %d: d, s = %v, %v; want %v, %v", l, b, got.d[b], got.s[b], want.d[b], want.s[b])
			}
		}
	}
}
