package kernels

import "math"

// expf is a float32 e^x accurate to about 1 ulp over the normal range;
// below about -87.3 it returns 0 (no subnormals), above 88.72 +Inf, and
// NaN for NaN.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	switch {
	case x != x:
		return x
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	}
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2hi
	r -= n * ln2lo
	// e^r on [-ln2/2, ln2/2]: minimax polynomial (Cephes expf).
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	// p·2^n; n in [-126, 128]: split to stay normal at the edges.
	ni := int32(n)
	if ni > 127 {
		return p * 2 * math.Float32frombits(uint32(ni-1+127)<<23)
	}
	if ni < -126 {
		return p * math.Float32frombits(uint32(ni+126+127)<<23) * 0x1p-126
	}
	return p * math.Float32frombits(uint32(ni+127)<<23)
}
