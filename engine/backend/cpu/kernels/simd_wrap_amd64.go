//go:build amd64 && !purego

package kernels

// Go wrappers of the assembly kernels: they check lengths, run the
// assembly on the longest prefix it handles and finish the rest in Go.

func dotF32SIMD2(a, b []float32) float32 {
	b = b[:len(a)]
	m := len(a) &^ 7
	var s float32
	if m > 0 {
		s = dotF32AVX2(&a[0], &b[0], m)
	}
	if m == len(a) {
		return s
	}
	return s + dotF32Generic(a[m:], b[m:])
}

func dotF32SIMD512(a, b []float32) float32 {
	b = b[:len(a)]
	m := len(a) &^ 15
	var s float32
	if m > 0 {
		s = dotF32AVX512(&a[0], &b[0], m)
	}
	if m == len(a) {
		return s
	}
	return s + dotF32SIMD2(a[m:], b[m:])
}

func dotF32BSIMD2(x []float32, w []byte) float32 {
	w = w[:4*len(x)]
	m := len(x) &^ 7
	var s float32
	if m > 0 {
		s = dotF32BAVX2(&x[0], &w[0], m)
	}
	if m == len(x) {
		return s
	}
	return s + dotF32BGeneric(x[m:], w[4*m:])
}

func dotF32BSIMD512(x []float32, w []byte) float32 {
	w = w[:4*len(x)]
	m := len(x) &^ 15
	var s float32
	if m > 0 {
		s = dotF32BAVX512(&x[0], &w[0], m)
	}
	if m == len(x) {
		return s
	}
	return s + dotF32BSIMD2(x[m:], w[4*m:])
}

func dotBF16SIMD2(x []float32, w []byte) float32 {
	w = w[:2*len(x)]
	m := len(x) &^ 7
	var s float32
	if m > 0 {
		s = dotBF16AVX2(&x[0], &w[0], m)
	}
	if m == len(x) {
		return s
	}
	return s + dotBF16Generic(x[m:], w[2*m:])
}

func dotBF16SIMD512(x []float32, w []byte) float32 {
	w = w[:2*len(x)]
	m := len(x) &^ 15
	var s float32
	if m > 0 {
		s = dotBF16AVX512(&x[0], &w[0], m)
	}
	if m == len(x) {
		return s
	}
	return s + dotBF16SIMD2(x[m:], w[2*m:])
}

func dotF16SIMD2(x []float32, w []byte) float32 {
	w = w[:2*len(x)]
	m := len(x) &^ 7
	var s float32
	if m > 0 {
		s = dotF16AVX2(&x[0], &w[0], m)
	}
	if m == len(x) {
		return s
	}
	return s + dotF16Generic(x[m:], w[2*m:])
}

func dotF16SIMD512(x []float32, w []byte) float32 {
	w = w[:2*len(x)]
	m := len(x) &^ 15
	var s float32
	if m > 0 {
		s = dotF16AVX512(&x[0], &w[0], m)
	}
	if m == len(x) {
		return s
	}
	return s + dotF16SIMD2(x[m:], w[2*m:])
}

func widenSIMD2(dst []float32, src []byte, bf16 bool) {
	src = src[:2*len(dst)]
	m := len(dst) &^ 7
	if m > 0 {
		if bf16 {
			widenBF16AVX2(&dst[0], &src[0], m)
		} else {
			widenF16AVX2(&dst[0], &src[0], m)
		}
	}
	widenGeneric(dst[m:], src[2*m:], bf16)
}

func axpySIMD2(alpha float32, x, y []float32) {
	y = y[:len(x)]
	m := len(x) &^ 7
	if m > 0 {
		axpyAVX2(alpha, &x[0], &y[0], m)
	}
	axpyGeneric(alpha, x[m:], y[m:])
}

func addSIMD2(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	m := len(dst) &^ 7
	if m > 0 {
		addAVX2(&dst[0], &a[0], &b[0], m)
	}
	addGeneric(dst[m:], a[m:], b[m:])
}

func mulSIMD2(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	m := len(dst) &^ 7
	if m > 0 {
		mulAVX2(&dst[0], &a[0], &b[0], m)
	}
	mulGeneric(dst[m:], a[m:], b[m:])
}

func scaleSIMD2(dst, x []float32, s float32) {
	x = x[:len(dst)]
	m := len(dst) &^ 7
	if m > 0 {
		scaleAVX2(&dst[0], &x[0], s, m)
	}
	scaleGeneric(dst[m:], x[m:], s)
}

func maxSIMD2(x []float32) float32 {
	m := len(x) &^ 7
	if m == 0 {
		return maxGeneric(x)
	}
	v := maxAVX2(&x[0], m)
	for _, e := range x[m:] {
		v = max(v, e)
	}
	return v
}

func expSubSumSIMD2(x []float32, mx float32) float32 {
	m := len(x) &^ 7
	var s float32
	if m > 0 {
		s = expSubSumAVX2(&x[0], m, mx)
	}
	return s + expSubSumGeneric(x[m:], mx)
}

func swigluSIMD2(dst, g, u []float32) {
	g, u = g[:len(dst)], u[:len(dst)]
	m := len(dst) &^ 7
	if m > 0 {
		swigluAVX2(&dst[0], &g[0], &u[0], m)
	}
	swigluGeneric(dst[m:], g[m:], u[m:])
}

func mlx4SIMD2(x, _ []float32, w []byte, s, b, xsum []float32, group int) float32 {
	if len(s) == 0 {
		return 0
	}
	ng := len(s)
	_, _, _, _ = x[ng*group-1], w[ng*group/2-1], b[ng-1], xsum[ng-1]
	return mlx4AVX2(&x[0], &w[0], &s[0], &b[0], &xsum[0], ng, group)
}

func mlx8SIMD2(x []float32, w []byte, s, b, xsum []float32, group int) float32 {
	if len(s) == 0 {
		return 0
	}
	ng := len(s)
	_, _, _, _ = x[ng*group-1], w[ng*group-1], b[ng-1], xsum[ng-1]
	return mlx8AVX2(&x[0], &w[0], &s[0], &b[0], &xsum[0], ng, group)
}

func mlx8SIMD512(x []float32, w []byte, s, b, xsum []float32, group int) float32 {
	if len(s) == 0 {
		return 0
	}
	ng := len(s)
	_, _, _, _ = x[ng*group-1], w[ng*group-1], b[ng-1], xsum[ng-1]
	return mlx8AVX512(&x[0], &w[0], &s[0], &b[0], &xsum[0], ng, group)
}

func q8_0SIMD2(a q8Row, w []byte) float32 {
	nb := len(a.d)
	if nb == 0 {
		return 0
	}
	_ = a.q[nb*32-1]
	_ = w[nb*q8_0Bytes-1]
	return q8_0AVX2(&a.q[0], &a.d[0], &w[0], nb)
}

func q4_0SIMD2(a q8Row, w []byte) float32 {
	nb := len(a.d)
	if nb == 0 {
		return 0
	}
	_ = a.q[nb*32-1]
	_ = w[nb*q4_0Bytes-1]
	return q4_0AVX2(&a.q[0], &a.d[0], &w[0], nb)
}

func q4KSIMD2(a q8Row, w []byte) float32 { return q4KCall(q4KAVX2, a, w) }

// q4KCall checks the lengths and runs a Q4_K row kernel.
func q4KCall(kernel func(xq *int8, xd, xs *float32, w *byte, nsb int) float32, a q8Row, w []byte) float32 {
	nsb := len(a.q) / kBlock
	if nsb == 0 {
		return 0
	}
	_ = a.d[nsb*8-1]
	_ = a.s[nsb*8-1]
	_ = w[nsb*q4KBytes-1]
	return kernel(&a.q[0], &a.d[0], &a.s[0], &w[0], nsb)
}

func q6KSIMD2(a q8Row, w []byte) float32 {
	var out [1]float32
	q6KRowsSIMD2(a, w, out[:])
	return out[0]
}

// q6KRowsSIMD2 sets dst[i] to q6KSIMD2 of a and weight row i of the
// len(dst) consecutive rows in w, in one call.
func q6KRowsSIMD2(a q8Row, w []byte, dst []float32) {
	nsb := len(a.q) / kBlock
	if nsb == 0 || len(dst) == 0 {
		clear(dst)
		return
	}
	_ = a.d[nsb*8-1]
	_ = w[len(dst)*nsb*q6KBytes-1]
	q6KRowsAVX2(&a.q[0], &a.d[0], &w[0], nsb, len(dst), &dst[0])
}

// dotF32Bx4SIMD512 is dotF32BSIMD512 of w against the 4 rows of cols
// values in x, bit-identical to it row by row.
func dotF32Bx4SIMD512(x []float32, cols int, w []byte, out *[4]float32) {
	w = w[:4*cols]
	_ = x[4*cols-1]
	m := cols &^ 15
	*out = [4]float32{}
	if m > 0 {
		dotF32Bx4AVX512(&x[0], 4*cols, &w[0], m, &out[0])
	}
	if m == cols {
		return
	}
	for j := range out {
		out[j] += dotF32BSIMD2(x[j*cols+m:(j+1)*cols], w[4*m:])
	}
}

// dotBF16x4SIMD512 is dotBF16SIMD512 of w against the 4 rows of cols
// values in x, bit-identical to it row by row.
func dotBF16x4SIMD512(x []float32, cols int, w []byte, out *[4]float32) {
	w = w[:2*cols]
	_ = x[4*cols-1]
	m := cols &^ 15
	*out = [4]float32{}
	if m > 0 {
		dotBF16x4AVX512(&x[0], 4*cols, &w[0], m, &out[0])
	}
	if m == cols {
		return
	}
	for j := range out {
		out[j] += dotBF16SIMD2(x[j*cols+m:(j+1)*cols], w[2*m:])
	}
}

// dotF16x4SIMD512 is dotF16SIMD512 of w against the 4 rows of cols
// values in x, bit-identical to it row by row.
func dotF16x4SIMD512(x []float32, cols int, w []byte, out *[4]float32) {
	w = w[:2*cols]
	_ = x[4*cols-1]
	m := cols &^ 15
	*out = [4]float32{}
	if m > 0 {
		dotF16x4AVX512(&x[0], 4*cols, &w[0], m, &out[0])
	}
	if m == cols {
		return
	}
	for j := range out {
		out[j] += dotF16SIMD2(x[j*cols+m:(j+1)*cols], w[2*m:])
	}
}

// q4Kx4SIMD512 is q4KSIMD2 for the 4 consecutive quantized rows in a,
// bit-identical to it row by row.
func q4Kx4SIMD512(a q8Row, cols int, w []byte, out *[4]float32) {
	q4Kx4Call(q4Kx4AVX512, a, cols, w, out)
}

// q4Kx4SIMD512VNNI is q4Kx4SIMD512 (bit-identical) with AVX-512 VNNI.
func q4Kx4SIMD512VNNI(a q8Row, cols int, w []byte, out *[4]float32) {
	q4Kx4RowsSIMD512VNNI(a, cols, w[:cols/kBlock*q4KBytes], out[:], 1)
}

// q4Kx4RowsSIMD512VNNI sets dst[j·stride+i] to q4Kx4SIMD512VNNI's result
// for activation row j of the 4 in a and weight row i of the consecutive
// rows in w, in one call.
func q4Kx4RowsSIMD512VNNI(a q8Row, cols int, w []byte, dst []float32, stride int) {
	nsb := cols / kBlock
	nb := cols / q8Block
	n := len(w) / (nsb * q4KBytes)
	if n == 0 {
		return
	}
	_ = a.q[4*cols-1]
	_ = a.d[4*nb-1]
	_ = a.s[4*nb-1]
	_ = dst[3*stride+n-1]
	q4Kx4RowsAVX512VNNI(&a.q[0], cols, &a.d[0], &a.s[0], 4*nb, &w[0], nsb, n, &dst[0], 4*stride)
}

// q4Kx4Call checks the lengths and runs a 4-row Q4_K kernel.
func q4Kx4Call(kernel func(xq *int8, qstride int, xd, xs *float32, dstride int, w *byte, nsb int, out *float32), a q8Row, cols int, w []byte, out *[4]float32) {
	nsb := cols / kBlock
	nb := cols / q8Block
	_ = a.q[4*cols-1]
	_ = a.d[4*nb-1]
	_ = a.s[4*nb-1]
	_ = w[nsb*q4KBytes-1]
	kernel(&a.q[0], cols, &a.d[0], &a.s[0], 4*nb, &w[0], nsb, &out[0])
}

// q6Kx4SIMD512 is q6KSIMD2 for the 4 consecutive quantized rows in a,
// bit-identical to it row by row.
func q6Kx4SIMD512(a q8Row, cols int, w []byte, out *[4]float32) {
	q6Kx4RowsSIMD512(a, cols, w[:cols/kBlock*q6KBytes], out[:], 1)
}

// q6Kx4RowsSIMD512 sets dst[j·stride+i] to q6Kx4SIMD512's result for
// activation row j of the 4 in a and weight row i of the consecutive rows
// in w, in one call.
func q6Kx4RowsSIMD512(a q8Row, cols int, w []byte, dst []float32, stride int) {
	nsb := cols / kBlock
	nb := cols / q8Block
	n := len(w) / (nsb * q6KBytes)
	if n == 0 {
		return
	}
	_ = a.q[4*cols-1]
	_ = a.d[4*nb-1]
	_ = dst[3*stride+n-1]
	q6Kx4RowsAVX512(&a.q[0], cols, &a.d[0], 4*nb, &w[0], nsb, n, &dst[0], 4*stride)
}

// q8_0x4SIMD512 is q8_0SIMD2 for the 4 consecutive quantized rows in a,
// bit-identical to it row by row.
func q8_0x4SIMD512(a q8Row, cols int, w []byte, out *[4]float32) {
	nb := cols / q8Block
	_ = a.q[4*cols-1]
	_ = a.d[4*nb-1]
	_ = w[nb*q8_0Bytes-1]
	q8_0x4AVX512(&a.q[0], cols, &a.d[0], 4*nb, &w[0], nb, &out[0])
}

// q4KSIMD512 is q4KSIMD2 (bit-identical) on the AVX-512 kernel.
func q4KSIMD512(a q8Row, w []byte) float32 { return q4KCall(q4KAVX512, a, w) }

// q4KSIMD512VNNI is q4KSIMD512 (bit-identical) with AVX-512 VNNI.
func q4KSIMD512VNNI(a q8Row, w []byte) float32 {
	var out [1]float32
	q4KRowsSIMD512VNNI(a, w, out[:])
	return out[0]
}

// q4KRowsSIMD512VNNI sets dst[i] to q4KSIMD512VNNI of a and weight row i
// of the len(dst) consecutive rows in w, in one call.
func q4KRowsSIMD512VNNI(a q8Row, w []byte, dst []float32) {
	nsb := len(a.q) / kBlock
	if nsb == 0 || len(dst) == 0 {
		clear(dst)
		return
	}
	_ = a.d[nsb*8-1]
	_ = a.s[nsb*8-1]
	_ = w[len(dst)*nsb*q4KBytes-1]
	q4KRowsAVX512VNNI(&a.q[0], &a.d[0], &a.s[0], &w[0], nsb, len(dst), &dst[0])
}

// mlx8x4SIMD512 is mlx8SIMD512 for the 4 rows of cols values in x (and
// of cols/group sums in xsum), bit-identical to it row by row.
func mlx8x4SIMD512(x []float32, cols int, w []byte, s, b, xsum []float32, group int, out *[4]float32) {
	ng := cols / group
	_, _, _, _, _ = x[4*cols-1], w[ng*group-1], s[ng-1], b[ng-1], xsum[4*ng-1]
	mlx8x4AVX512(&x[0], 4*cols, &w[0], &s[0], &b[0], &xsum[0], 4*ng, ng, group, &out[0])
}

// quantizeQ8SIMD512 is quantizeQ8Generic (the same results) on AVX-512.
func quantizeQ8SIMD512(dst q8Row, x []float32) {
	nb := len(x) / q8Block
	if nb == 0 {
		return
	}
	_ = dst.q[nb*q8Block-1]
	_ = dst.d[nb-1]
	_ = dst.s[nb-1]
	quantizeQ8AVX512(&x[0], &dst.q[0], &dst.d[0], &dst.s[0], nb)
}
