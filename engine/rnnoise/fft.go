package rnnoise

import (
	"math"
	"math/cmplx"
)

// fft is a mixed-radix complex FFT of a fixed size (the 960-point
// transform of RNNoise's 20 ms window: radices 4, 4, 4, 3, 5), in float64.
type fft struct {
	n  int
	tw []complex128 // tw[k] = e^{−2πik/n}
}

func newFFT(n int) *fft {
	f := &fft{n: n, tw: make([]complex128, n)}
	for k := range f.tw {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		f.tw[k] = complex(c, s)
	}
	return f
}

// forward returns X_k = Σ_j x_j e^{−2πijk/n} (unscaled) into dst.
func (f *fft) forward(dst, src []complex128) {
	scratch := make([]complex128, f.n)
	f.rec(dst, src, 1, f.n, scratch)
}

// inverse returns x_j = Σ_k X_k e^{+2πijk/n} (unscaled) into dst.
func (f *fft) inverse(dst, src []complex128) {
	c := make([]complex128, f.n)
	for i, v := range src {
		c[i] = cmplx.Conj(v)
	}
	f.forward(dst, c)
	for i, v := range dst {
		dst[i] = cmplx.Conj(v)
	}
}

// rec transforms the n values src[0], src[stride], … into dst[:n]
// (decimation in time by the smallest radix of n).
func (f *fft) rec(dst, src []complex128, stride, n int, scratch []complex128) {
	if n == 1 {
		dst[0] = src[0]
		return
	}
	p := radix(n)
	m := n / p
	for r := range p {
		f.rec(dst[r*m:(r+1)*m], src[r*stride:], stride*p, m, scratch[r*m:(r+1)*m])
	}
	step := f.n / n // twiddle index of e^{−2πi/n}
	tmp := scratch[:n]
	for k := range m {
		for q := range p {
			out := k + q*m
			inc := out * step // < f.n: the index of e^{−2πi·out/n}
			sum := dst[k]
			j := 0
			for r := 1; r < p; r++ {
				if j += inc; j >= f.n {
					j -= f.n
				}
				sum += dst[r*m+k] * f.tw[j]
			}
			tmp[out] = sum
		}
	}
	copy(dst[:n], tmp)
}

func radix(n int) int {
	for _, p := range []int{4, 2, 3, 5} {
		if n%p == 0 {
			return p
		}
	}
	for p := 7; p*p <= n; p += 2 {
		if n%p == 0 {
			return p
		}
	}
	return n
}
