package kernels

import "math"

// q8Block is the number of activation elements sharing one scale.
const q8Block = 32

// q8Row is an activation row quantized for the GGUF kernels: x[i] ≈
// d[i/32]·q[i], with q in [-127, 127]; s[j] is the sum of the
// quantized block, d[j]·Σ q over block j, used for the min/offset terms of
// K-quants so that they see the same activations as the scale terms and
// the product is exactly dequant(W)·dequant(x) up to f32 rounding (as
// ggml's q8_K bsums).
type q8Row struct {
	q []int8
	d []float32
	s []float32
}

// quantizeQ8Generic quantizes x (len a multiple of 32) into dst, whose
// slices have the right lengths. It rounds to nearest, ties away from
// zero. Every level's quantizer gives exactly its results.
func quantizeQ8Generic(dst q8Row, x []float32) {
	for b := 0; b < len(x)/q8Block; b++ {
		xs := x[b*q8Block : (b+1)*q8Block]
		var amax float32
		for _, v := range xs {
			if a := float32(math.Abs(float64(v))); a > amax {
				amax = a
			}
		}
		qs := dst.q[b*q8Block : (b+1)*q8Block]
		if amax == 0 {
			dst.d[b] = 0
			dst.s[b] = 0
			clear(qs)
			continue
		}
		d := amax / 127
		id := 127 / amax
		dst.d[b] = d
		var isum int32
		for i, v := range xs {
			q := int8(math.Round(float64(v * id)))
			qs[i] = q
			isum += int32(q)
		}
		dst.s[b] = d * float32(isum)
	}
}
