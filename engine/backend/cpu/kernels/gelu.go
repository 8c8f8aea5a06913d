package kernels

import "math"

// GELU sets dst[i] = x[i]·Φ(x[i]), the exact (erf) GELU of BERT; dst
// may alias x. It panics if the lengths differ. The
// pure-Go level evaluates math.Erf in float64; LevelAVX512 evaluates a
// rational approximation of erf in f32 (within 7e-8 of it), the same
// instructions for every element wherever it sits in x.
func (k *Kernels) GELU(dst, x []float32) {
	sameLen("GELU", len(dst), len(x))
	k.impl.gelu(dst, x)
}

func geluGeneric(dst, x []float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(0.5 * float64(v) * (1 + math.Erf(float64(v)/math.Sqrt2)))
	}
}
