package sample

import "math"

// expNeg returns e^x for x <= 0 with a relative error below 1e-8, and 0
// for x < -708 (where e^x leaves the float64 range), -Inf and NaN. It is
// about twice as fast as math.Exp and inlined; the sampler calls it once
// per token of the vocabulary, and its error is far below the float32
// precision of the logits.
func expNeg(x float64) float64 {
	const (
		log2e = 1.4426950408889634 // 1/ln 2
		ln2   = 0.6931471805599453
		round = 0x1.8p52 // adding and subtracting it rounds to an integer
	)
	if !(x >= -708) {
		return 0
	}
	// e^x = 2^k · e^r with k = round(x/ln 2) and |r| <= ln2/2; e^r is its
	// Taylor polynomial to degree 7, evaluated in Estrin's scheme.
	k := x*log2e + round - round
	r := x - k*ln2
	r2 := r * r
	p := (1 + r) + r2*((1.0/2+r*(1.0/6))+r2*((1.0/24+r*(1.0/120))+r2*(1.0/720+r*(1.0/5040))))
	return p * math.Float64frombits(uint64(int64(k)+1023)<<52)
}
