//go:build amd64 && !purego

package kernels

//go:noescape
func gemm4x64AVX512(x *float32, ldx int, p *float32, pstride int, k int, dst *float32, ldd int)

//go:noescape
func gemm1x64AVX512(x *float32, p *float32, pstride int, k int, dst *float32)

//go:noescape
func gemm4x16AVX512(x *float32, ldx int, p *float32, k int, dst *float32, ldd int)

//go:noescape
func gemm1x16AVX512(x *float32, p *float32, k int, dst *float32)

// gemmSIMD512 is impl.gemm on the AVX-512 kernels: groups of 4 panels
// (64 outputs) by groups of 4 activation rows, the rows left over one at
// a time, then the panels left over one at a time; a panel cut by r1
// goes through a stack tile and only its outputs below r1 are copied.
// Lengths were checked by the caller; the bounds checks below only
// guard the pointers handed to assembly.
func gemmSIMD512(dst []float32, ldd int, x []float32, ldx, m int, p []float32, cols, r0, r1 int) {
	_ = x[(m-1)*ldx+cols-1]
	_ = dst[(m-1)*ldd+r1-1]
	pstride := PanelRows * cols
	o0 := r0
	for ; o0+4*PanelRows <= r1; o0 += 4 * PanelRows {
		panel := p[o0*cols : (o0+4*PanelRows)*cols]
		b := 0
		for ; b+4 <= m; b += 4 {
			gemm4x64AVX512(&x[b*ldx], ldx, &panel[0], pstride, cols, &dst[b*ldd+o0], ldd)
		}
		for ; b < m; b++ {
			gemm1x64AVX512(&x[b*ldx], &panel[0], pstride, cols, &dst[b*ldd+o0])
		}
	}
	var tile [4 * PanelRows]float32
	for ; o0 < r1; o0 += PanelRows {
		panel := p[o0*cols : (o0+PanelRows)*cols]
		n := min(PanelRows, r1-o0)
		b := 0
		for ; b+4 <= m; b += 4 {
			if n == PanelRows {
				gemm4x16AVX512(&x[b*ldx], ldx, &panel[0], cols, &dst[b*ldd+o0], ldd)
				continue
			}
			gemm4x16AVX512(&x[b*ldx], ldx, &panel[0], cols, &tile[0], PanelRows)
			for j := range 4 {
				copy(dst[(b+j)*ldd+o0:(b+j)*ldd+o0+n], tile[j*PanelRows:])
			}
		}
		for ; b < m; b++ {
			if n == PanelRows {
				gemm1x16AVX512(&x[b*ldx], &panel[0], cols, &dst[b*ldd+o0])
				continue
			}
			gemm1x16AVX512(&x[b*ldx], &panel[0], cols, &tile[0])
			copy(dst[b*ldd+o0:b*ldd+o0+n], tile[:n])
		}
	}
}
