//go:build amd64 && !purego

package kernels

//go:noescape
func bf16Tile4x4AVX512(x *[4]*float32, w *[4]*byte, n int, out *[16]float32, pf int)

//go:noescape
func bf16Tile1x1AVX512(x *float32, w *byte, n int) float32

// bf16TileSIMD512 is impl.bf16Tile on the AVX-512 tile kernels: the
// full 16-wide chunks in assembly, the rest of each pair's columns in Go
// added after the chunk sum, the same way for every tile shape. Only the
// 4×4 kernel prefetches (pf); smaller tiles are one row stream at a time,
// which the hardware prefetcher follows. It is mulRowsTiled's inner
// step, uninstrumented like it.
//
//go:norace
func bf16TileSIMD512(x *[4][]float32, nx int, w *[4][]byte, out *[16]float32, pf int) {
	cols := len(x[0])
	for i := range w {
		w[i] = w[i][:2*cols]
	}
	for j := range nx {
		x[j] = x[j][:cols]
	}
	m := cols &^ 15
	*out = [16]float32{}
	if m > 0 {
		var wp [4]*byte
		for i := range wp {
			wp[i] = &w[i][0]
		}
		if nx == 4 {
			var xp [4]*float32
			for j := range xp {
				xp[j] = &x[j][0]
			}
			bf16Tile4x4AVX512(&xp, &wp, m, out, pf)
		} else {
			for j := range nx {
				for i, p := range wp {
					out[4*j+i] = bf16Tile1x1AVX512(&x[j][0], p, m)
				}
			}
		}
	}
	if m == cols {
		return
	}
	for j := range nx {
		for i := range w {
			out[4*j+i] += dotBF16Generic(x[j][m:], w[i][2*m:])
		}
	}
}

//go:noescape
func f32Tile4x4AVX512(x *[4]*float32, w *[4]*float32, n int, out *[16]float32)

//go:noescape
func f32Tile1x4AVX512(x *float32, w *[4]*float32, n int, out *[4]float32)

//go:noescape
func mlx4DequantAVX512(dst *float32, w *byte, s, b *float32, gsel, nchunks int)

// f32TileSIMD512 is impl.f32Tile on the AVX-512 tile kernels, finishing
// each pair's columns past the last full 16 in Go, the same way for every
// tile shape.
func f32TileSIMD512(x *[4][]float32, nx int, w *[4][]float32, out *[16]float32) {
	cols := len(x[0])
	for i := range w {
		w[i] = w[i][:cols]
	}
	for j := range nx {
		x[j] = x[j][:cols]
	}
	m := cols &^ 15
	*out = [16]float32{}
	if m > 0 {
		var wp [4]*float32
		for i := range wp {
			wp[i] = &w[i][0]
		}
		if nx == 4 {
			var xp [4]*float32
			for j := range xp {
				xp[j] = &x[j][0]
			}
			f32Tile4x4AVX512(&xp, &wp, m, out)
		} else {
			for j := range nx {
				f32Tile1x4AVX512(&x[j][0], &wp, m, (*[4]float32)(out[4*j:]))
			}
		}
	}
	if m == cols {
		return
	}
	for j := range nx {
		for i := range w {
			out[4*j+i] += dotF32Generic(x[j][m:], w[i][m:])
		}
	}
}

// mlx4DequantSIMD512 is impl.mlx4Dequant: the full 128-code chunks in
// the AVX-512 kernel's permuted layout, the rest in Go in natural order.
func mlx4DequantSIMD512(dst []float32, w []byte, s, b []float32, group int) {
	chunks := len(dst) / 128
	if chunks > 0 {
		nc := chunks * 128 / group
		_, _ = dst[chunks*128-1], w[chunks*64-1]
		_, _ = s[:cap(s)][nc+2], b[:cap(b)][nc+2]
		mlx4DequantAVX512(&dst[0], &w[0], &s[0], &b[0], group/64, chunks)
	}
	for i := chunks * 128; i < len(dst); i++ {
		g := i / group
		dst[i] = s[g]*float32(mlxCode(w, 4, i)) + b[g]
	}
}

//go:noescape
func mlx4Fused1x4AVX512(xp *float32, w *byte, wstride int, s, b *float32, sstride, gsel, nchunks int, out *[4]float32)

// mlx4Fused1x4SIMD512 is impl.mlx4Fused: out[i] is the product of the
// permuted row xp (cols values, a multiple of 128) with MLX 4-bit row i
// of the 4 rows of rowBytes at w, whose scales and biases are rows of ng
// values at s and b, bit-identical to mlx4Dequant then f32Tile.
func mlx4Fused1x4SIMD512(xp []float32, w []byte, rowBytes int, s, b []float32, ng, group int, out *[4]float32) {
	cols := len(xp)
	chunks := cols / 128
	*out = [4]float32{}
	if chunks == 0 {
		return
	}
	_, _ = w[3*rowBytes+chunks*64-1], xp[chunks*128-1]
	_, _ = s[:cap(s)][3*ng+chunks*128/group+2], b[:cap(b)][3*ng+chunks*128/group+2]
	mlx4Fused1x4AVX512(&xp[0], &w[0], rowBytes, &s[0], &b[0], 4*ng, group/64, chunks, out)
}
