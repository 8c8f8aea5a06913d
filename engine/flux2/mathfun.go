package flux2

import "math"

// The float32 log and sine/cosine torch's AVX2 normal sampler uses
// (normal_fill_16_AVX2, through avx_mathfun's log256_ps and
// sincos256_ps): Cephes-style range reduction and polynomials, evaluated
// in float32 with fused multiply-adds where the compiler contracts them.
// Written from the algorithm (Cephes' logf and sinf/cosf), to reproduce
// torch's values bit for bit.

// madd returns a·b + c as torch's build computes it: GCC contracts the
// intrinsics' multiply and add into one fused multiply-add (found by
// comparing with torch: the unfused evaluation differs in the last bit).
func madd(a, b, c float32) float32 { return fmaf(a, b, c) }

// fmaf is a·b + c rounded once to float32.
func fmaf(a, b, c float32) float32 {
	p := float64(a) * float64(b) // exact: 24+24 bits
	s := p + float64(c)
	// When s lies exactly halfway between two float32s, rounding it again
	// would pick the even one whichever side the exact sum is on: move s
	// one double towards the sum's rounding error first.
	if math.Float64bits(s)&(1<<29-1) == 1<<28 {
		bb := s - p
		switch e := (p - (s - bb)) + (float64(c) - bb); {
		case e > 0:
			s = math.Nextafter(s, math.Inf(1))
		case e < 0:
			s = math.Nextafter(s, math.Inf(-1))
		}
	}
	return float32(s)
}

// logAVX is log256_ps for a positive normal x.
func logAVX(x float32) float32 {
	const sqrtHalf = 0.707106781186547524
	bits := math.Float32bits(x)
	e := float32(int32(bits>>23)-0x7f) + 1
	x = math.Float32frombits(bits&^0x7f800000 | math.Float32bits(0.5))
	var tmp float32
	if x < sqrtHalf {
		tmp = x
		e--
	}
	x = x - 1 + tmp
	z := x * x
	y := float32(7.0376836292e-2)
	for _, p := range [...]float32{-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
		-1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1} {
		y = madd(y, x, p)
	}
	y = y * x
	y = madd(y, z, float32(e*-2.12194440e-4))
	y -= z * 0.5 // exact
	x = x + y
	return madd(e, 0.693359375, x)
}

// sincosAVX is sincos256_ps.
func sincosAVX(x float32) (sin, cos float32) {
	signSin := math.Float32bits(x) & 0x80000000
	x = float32(math.Abs(float64(x)))
	j := int32(x * 1.27323954473516) // ×4/π, truncated
	j = (j + 1) &^ 1
	y := float32(j)
	swapSin := uint32(j&4) << 29
	sinPoly := j&2 == 0 // the sine polynomial gives the sine
	x = madd(y, -0.78515625, x)
	x = madd(y, -2.4187564849853515625e-4, x)
	x = madd(y, -3.77489497744594108e-8, x)
	signCos := uint32(^(j-2)&4) << 29
	signSin ^= swapSin
	z := x * x
	c := float32(2.443315711809948e-5)
	c = madd(c, z, -1.388731625493765e-3)
	c = madd(c, z, 4.166664568298827e-2)
	c = c * z
	c = madd(c, z, float32(-z*0.5))
	c = c + 1
	s := float32(-1.9515295891e-4)
	s = madd(s, z, 8.3321608736e-3)
	s = madd(s, z, -1.6666654611e-1)
	s = s * z
	s = madd(s, x, x)
	if sinPoly {
		sin, cos = s, c
	} else {
		sin, cos = c, s
	}
	return math.Float32frombits(math.Float32bits(sin) ^ signSin), math.Float32frombits(math.Float32bits(cos) ^ signCos)
}
