// Package fft is a mixed-radix fast Fourier transform for any length: the
// length is factored into 4s, 2s, 3s, 5s and whatever primes remain, and
// transformed by recursive decimation in time, each stage a small DFT of
// its radix (O(n·Σ radices), so a prime length degrades to a plain DFT).
// Whisper's front end needs n = 400 = 4·4·5·5; RealPlan computes the
// spectrum of real input through one complex transform of half the
// length. Results are in float64; plans are immutable and safe for
// concurrent use.
package fft

import (
	"fmt"
	"math"
	"math/cmplx"
)

// Plan is a forward complex DFT of one length:
// X[k] = Σ_j x[j]·exp(-2πi·jk/n).
type Plan struct {
	n       int
	factors []int
	tw      []complex128 // exp(-2πi·j/n), j < n
}

// NewPlan plans a transform of length n (n >= 1).
func NewPlan(n int) (*Plan, error) {
	if n < 1 {
		return nil, fmt.Errorf("fft: length %d", n)
	}
	p := &Plan{n: n, factors: factor(n), tw: make([]complex128, n)}
	for j := range n {
		s, c := math.Sincos(-2 * math.Pi * float64(j) / float64(n))
		p.tw[j] = complex(c, s)
	}
	return p, nil
}

// Len is the transform length.
func (p *Plan) Len() int { return p.n }

// factor splits n into radices, 4s first, then 2, 3, 5, then other primes.
func factor(n int) []int {
	var f []int
	for _, r := range []int{4, 2, 3, 5} {
		for n%r == 0 {
			f = append(f, r)
			n /= r
		}
	}
	for r := 7; r*r <= n; r += 2 {
		for n%r == 0 {
			f = append(f, r)
			n /= r
		}
	}
	if n > 1 {
		f = append(f, n)
	}
	return f
}

// Forward writes the DFT of src into dst; both have length Len and must
// not overlap.
func (p *Plan) Forward(dst, src []complex128) {
	if len(dst) != p.n || len(src) != p.n {
		panic(fmt.Sprintf("fft: Forward with lengths %d, %d on a plan of %d", len(dst), len(src), p.n))
	}
	p.rec(dst, src, 1, 0, p.n)
}

// rec transforms the n samples src[0], src[stride], ... into out[:n],
// using radices factors[fi:].
func (p *Plan) rec(out, src []complex128, stride, fi, n int) {
	if n == 1 {
		out[0] = src[0]
		return
	}
	r := p.factors[fi]
	m := n / r
	for q := range r {
		p.rec(out[q*m:(q+1)*m], src[q*stride:], stride*r, fi+1, m)
	}
	// Combine r interleaved sub-transforms of length m:
	// X[k + s·m] = Σ_q W_n^{qk} · W_r^{qs} · Y_q[k].
	step := p.n / n // W_n^j = tw[j·step]
	var small [8]complex128
	t := small[:0]
	if r > len(small) {
		t = make([]complex128, r)
	} else {
		t = small[:r]
	}
	switch r {
	case 2:
		for k := range m {
			a, b := out[k], out[m+k]*p.tw[k*step]
			out[k], out[m+k] = a+b, a-b
		}
	case 4:
		for k := range m {
			a := out[k]
			b := out[m+k] * p.tw[k*step]
			c := out[2*m+k] * p.tw[2*k*step]
			d := out[3*m+k] * p.tw[3*k*step]
			s0, s1 := a+c, a-c
			s2, s3 := b+d, (b-d)*complex(0, -1)
			out[k], out[m+k], out[2*m+k], out[3*m+k] = s0+s2, s1+s3, s0-s2, s1-s3
		}
	default:
		rstep := p.n / r // W_r^j = tw[j·rstep]
		for k := range m {
			for q := range r {
				t[q] = out[q*m+k] * p.tw[(q*k*step)%p.n]
			}
			for s := range r {
				sum := t[0]
				for q := 1; q < r; q++ {
					sum += t[q] * p.tw[(q*s%r)*rstep]
				}
				out[s*m+k] = sum
			}
		}
	}
}

// RealPlan is the DFT of real input of length n, returning the n/2+1
// non-negative frequencies (the rest are their conjugates).
type RealPlan struct {
	n    int
	half *Plan        // n/2 complex points, for even n
	full *Plan        // n points, for odd n
	tw   []complex128 // exp(-2πi·k/n), k <= n/2
}

// NewReal plans a real transform of length n (n >= 1).
func NewReal(n int) (*RealPlan, error) {
	if n < 1 {
		return nil, fmt.Errorf("fft: length %d", n)
	}
	rp := &RealPlan{n: n}
	var err error
	if n%2 == 1 {
		rp.full, err = NewPlan(n)
		return rp, err
	}
	if rp.half, err = NewPlan(n / 2); err != nil {
		return nil, err
	}
	rp.tw = make([]complex128, n/2+1)
	for k := range rp.tw {
		s, c := math.Sincos(-2 * math.Pi * float64(k) / float64(n))
		rp.tw[k] = complex(c, s)
	}
	return rp, nil
}

// Len is the input length.
func (rp *RealPlan) Len() int { return rp.n }

// Forward writes X[0..n/2] of the real input src (length Len) into dst
// (length Len/2+1).
func (rp *RealPlan) Forward(dst []complex128, src []float64) {
	n := rp.n
	if len(src) != n || len(dst) != n/2+1 {
		panic(fmt.Sprintf("fft: real Forward with lengths %d, %d on a plan of %d", len(dst), len(src), n))
	}
	if rp.full != nil {
		in := make([]complex128, n)
		out := make([]complex128, n)
		for i, v := range src {
			in[i] = complex(v, 0)
		}
		rp.full.Forward(out, in)
		copy(dst, out[:n/2+1])
		return
	}
	// Pack even samples as real parts and odd as imaginary parts, transform
	// n/2 points, then separate: with Z the packed transform,
	// E[k] = (Z[k] + conj Z[h-k])/2, O[k] = (Z[k] - conj Z[h-k])/(2i),
	// X[k] = E[k] + W_n^k·O[k].
	h := n / 2
	z := make([]complex128, 2*h)
	in, out := z[:h], z[h:]
	for i := range h {
		in[i] = complex(src[2*i], src[2*i+1])
	}
	rp.half.Forward(out, in)
	for k := 0; k <= h; k++ {
		zk := out[k%h]
		zc := cmplx.Conj(out[(h-k)%h])
		e := (zk + zc) * 0.5
		o := (zk - zc) * complex(0, -0.5)
		dst[k] = e + rp.tw[k]*o
	}
}
