//go:build amd64 && !purego

package kernels

//go:noescape
func geluAVX512(dst, x *float32, n int)

// geluSIMD512 is impl.gelu on the AVX-512 kernel; a tail of under 16
// goes through a 16-float buffer, so it gets the same instructions.
func geluSIMD512(dst, x []float32) {
	dst = dst[:len(x)]
	m := len(x) &^ 15
	if m > 0 {
		geluAVX512(&dst[0], &x[0], m)
	}
	if m == len(x) {
		return
	}
	var buf [16]float32
	n := copy(buf[:], x[m:])
	geluAVX512(&buf[0], &buf[0], 16)
	copy(dst[m:], buf[:n])
}
