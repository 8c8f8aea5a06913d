//go:build amd64 && !purego

package kernels

//go:noescape
func bf16Tile4x4AVX512(x *[4]*float32, w *[4]*byte, n int, out *[16]float32)

//go:noescape
func bf16Tile1x4AVX512(x *float32, w *[4]*byte, n int, out *[4]float32)

// bf16TileSIMD512 is impl.bf16Tile on the AVX-512 tile kernels: the
// full 16-wide chunks in assembly, the rest of each pair's columns in Go
// added after the chunk sum, the same way for every tile shape.
func bf16TileSIMD512(x *[4][]float32, nx int, w *[4][]byte, out *[16]float32) {
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
			bf16Tile4x4AVX512(&xp, &wp, m, out)
		} else {
			for j := range nx {
				bf16Tile1x4AVX512(&x[j][0], &wp, m, (*[4]float32)(out[4*j:]))
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
func mlx4x8AVX512(xp *float32, xstride int, w *byte, s, b, xsum *float32, sstride, gsel, nchunks int, out *float32)

// mlx4x8SIMD512 is mlx4SIMD512 for the 8 rows of cols values in x and xp
// (and of cols/group sums in xsum), bit-identical to it row by row.
func mlx4x8SIMD512(x, xp []float32, cols int, w []byte, s, b, xsum []float32, group int, out *[8]float32) {
	ng := cols / group
	chunks := cols / 128
	if chunks == 0 {
		for r := range out {
			out[r] = mlx4SIMD2(x[r*cols:(r+1)*cols], nil, w, s, b, xsum[r*ng:(r+1)*ng], group)
		}
		return
	}
	per := 128 / group
	nc := chunks * per
	_, _, _, _ = xp[7*cols+chunks*128-1], w[chunks*64-1], b[nc-1], xsum[7*ng+nc-1]
	_ = s[:cap(s)][nc+2]
	mlx4x8AVX512(&xp[0], 4*cols, &w[0], &s[0], &b[0], &xsum[0], 4*ng, group/64, chunks, &out[0])
	for r := range out {
		out[r] += mlx4SIMD2(x[r*cols+chunks*128:(r+1)*cols], nil, w[chunks*64:], s[nc:], b[nc:], xsum[r*ng+nc:(r+1)*ng], group)
	}
}
