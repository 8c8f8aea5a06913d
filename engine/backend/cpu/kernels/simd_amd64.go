//go:build amd64 && !purego

package kernels

// Assembly kernels (see *_amd64.s). They take raw pointers and element
// counts that the Go wrappers below have checked; counts are multiples of
// the vector width noted, and the wrappers finish any remainder.

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func dotF32BAVX2(x *float32, w *byte, n int) float32

//go:noescape
func dotF32BAVX512(x *float32, w *byte, n int) float32

//go:noescape
func dotBF16AVX2(x *float32, w *byte, n int) float32

//go:noescape
func dotF16AVX2(x *float32, w *byte, n int) float32

//go:noescape
func dotF32AVX512(a, b *float32, n int) float32

//go:noescape
func dotBF16AVX512(x *float32, w *byte, n int) float32

//go:noescape
func dotF16AVX512(x *float32, w *byte, n int) float32

//go:noescape
func dotF32Bx4AVX512(x *float32, stride int, w *byte, n int, out *float32)

//go:noescape
func dotBF16x4AVX512(x *float32, stride int, w *byte, n int, out *float32)

//go:noescape
func dotF16x4AVX512(x *float32, stride int, w *byte, n int, out *float32)

//go:noescape
func widenBF16AVX2(dst *float32, src *byte, n int)

//go:noescape
func widenF16AVX2(dst *float32, src *byte, n int)

//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

//go:noescape
func addAVX2(dst, a, b *float32, n int)

//go:noescape
func mulAVX2(dst, a, b *float32, n int)

//go:noescape
func scaleAVX2(dst, x *float32, s float32, n int)

//go:noescape
func mlx4AVX2(x *float32, w *byte, s, b, xsum *float32, ngroups, group int) float32

//go:noescape
func mlx8AVX2(x *float32, w *byte, s, b, xsum *float32, ngroups, group int) float32

//go:noescape
func mlx8x4AVX512(x *float32, xstride int, w *byte, s, b, xsum *float32, sstride, ngroups, group int, out *float32)

//go:noescape
func mlx8AVX512(x *float32, w *byte, s, b, xsum *float32, ngroups, group int) float32

//go:noescape
func q8_0AVX2(xq *int8, xd *float32, w *byte, nb int) float32

//go:noescape
func q4_0AVX2(xq *int8, xd *float32, w *byte, nb int) float32

//go:noescape
func q4KAVX2(xq *int8, xd, xs *float32, w *byte, nsb int) float32

//go:noescape
func q4Kx4AVX512(xq *int8, qstride int, xd, xs *float32, dstride int, w *byte, nsb int, out *float32)

//go:noescape
func q6Kx4RowsAVX512(xq *int8, qstride int, xd *float32, dstride int, w *byte, nsb, nrows int, dst *float32, ostride int)

//go:noescape
func q8_0x4AVX512(xq *int8, qstride int, xd *float32, dstride int, w *byte, nb int, out *float32)

//go:noescape
func q4KAVX512(xq *int8, xd, xs *float32, w *byte, nsb int) float32

//go:noescape
func q6KRowsAVX2(xq *int8, xd *float32, w *byte, nsb, nrows int, dst *float32)

//go:noescape
func expSubSumAVX2(x *float32, n int, m float32) float32

//go:noescape
func swigluAVX2(dst, gate, up *float32, n int)

//go:noescape
func maxAVX2(x *float32, n int) float32

func simdImpl(l Level) impl {
	k := genericImpl
	k.level = l
	k.dotF32 = dotF32SIMD2
	k.dotF32B = dotF32BSIMD2
	k.dotBF16 = dotBF16SIMD2
	k.dotF16 = dotF16SIMD2
	k.widen = widenSIMD2
	k.mlx4 = mlx4SIMD2
	k.mlx8 = mlx8SIMD2
	k.q8_0 = q8_0SIMD2
	k.q4_0 = q4_0SIMD2
	k.q4K = q4KSIMD2
	k.q6K = q6KSIMD2
	k.q6KRows = q6KRowsSIMD2
	k.q5K = q5KSIMD2
	k.q3K = q3KSIMD2
	k.q2K = q2KSIMD2
	k.axpy = axpySIMD2
	k.add = addSIMD2
	k.mul = mulSIMD2
	k.scale = scaleSIMD2
	k.maxf = maxSIMD2
	k.expSubSum = expSubSumSIMD2
	k.swiglu = swigluSIMD2
	if l == LevelAVX512 {
		k.dotF32 = dotF32SIMD512
		k.dotF32B = dotF32BSIMD512
		k.dotBF16 = dotBF16SIMD512
		k.dotF16 = dotF16SIMD512
		k.dotF32B4 = dotF32Bx4SIMD512
		k.dotBF164 = dotBF16x4SIMD512
		k.dotF164 = dotF16x4SIMD512
		k.bf16Tile = bf16TileSIMD512
		k.f32Tile = f32TileSIMD512
		k.gemm = gemmSIMD512
		k.gelu = geluSIMD512
		k.mlx4Dequant = mlx4DequantSIMD512
		k.mlx4Fused = mlx4Fused1x4SIMD512
		k.mlx4Perm = true
		k.mlx8x4 = mlx8x4SIMD512
		k.quantizeQ8 = quantizeQ8SIMD512
		k.q4K = q4KSIMD512
		k.q4K4 = q4Kx4SIMD512
		if features.vnni {
			k.q4K, k.q4K4 = q4KSIMD512VNNI, q4Kx4SIMD512VNNI
			k.q4KRows, k.q4K4Rows = q4KRowsSIMD512VNNI, q4Kx4RowsSIMD512VNNI
		}
		k.q6K4, k.q6K4Rows = q6Kx4SIMD512, q6Kx4RowsSIMD512
		k.q8_04 = q8_0x4SIMD512
		k.mlx8 = mlx8SIMD512
	}
	return k
}

//go:noescape
func q4KRowsAVX512VNNI(xq *int8, xd, xs *float32, w *byte, nsb, nrows int, dst *float32)

//go:noescape
func q4Kx4RowsAVX512VNNI(xq *int8, qstride int, xd, xs *float32, dstride int, w *byte, nsb, nrows int, dst *float32, ostride int)

//go:noescape
func quantizeQ8AVX512(x *float32, q *int8, d, s *float32, nb int)
