package gguf

import (
	"encoding/binary"
	"math"
)

// The 256-element "K" super-block types (ggml-common.h):
//
//	Q2_K (84):  scales [16]byte (4-bit scale | 4-bit min), qs [64]byte, d f16, dmin f16
//	Q3_K (110): hmask [32]byte, qs [64]byte, scales [12]byte (16 × 6 bits), d f16
//	Q4_K (144): d f16, dmin f16, scales [12]byte (8 × 6-bit scale and min), qs [128]byte
//	Q5_K (176): d f16, dmin f16, scales [12]byte, qh [32]byte, qs [128]byte
//	Q6_K (210): ql [128]byte, qh [64]byte, scales [16]int8, d f16
//	Q8_K (292): d f32, qs [256]int8, bsums [16]int16
//
// Every product is rounded to float32 before the next operation, as ggml's
// scalar C does, so results match it bit for bit (Go would otherwise fuse
// a*b-c into one FMA on arm64).

const qkK = 256 // elements per super-block

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block
// (ggml's get_scale_min_k4): the first four pairs sit in the low six bits of
// bytes 0–3 and 4–7; the last four have their low nibbles in bytes 8–11 and
// their top two bits in the spare top bits of bytes 0–7.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0x0f | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func dequantQ2_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*84 : b*84+84]
		scales, qs := blk[:16], blk[16:80]
		d, dmin := f16(blk[80:]), f16(blk[82:])
		y := dst[b*qkK : b*qkK+qkK]
		is, k := 0, 0
		for n := 0; n < qkK; n += 128 {
			q := qs[n/4 : n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					sc := scales[is]
					is++
					dl := d * float32(sc&0x0f)
					ml := dmin * float32(sc>>4)
					for l := range 16 {
						y[k] = float32(dl*float32((q[l+16*half]>>shift)&3)) - ml
						k++
					}
				}
			}
		}
	}
}

// scalesQ3K unpacks the sixteen 6-bit scales of a Q3_K block, minus 32.
func scalesQ3K(s []byte) [16]int8 {
	var out [16]int8
	for j := range 16 {
		var lo uint8
		if j < 8 {
			lo = s[j] & 0x0f
		} else {
			lo = s[j-8] >> 4
		}
		hi := (s[8+j%4] >> (2 * (j / 4))) & 3
		out[j] = int8(lo|hi<<4) - 32
	}
	return out
}

func dequantQ3_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*110 : b*110+110]
		hm, qs := blk[:32], blk[32:96]
		sc := scalesQ3K(blk[96:108])
		d := f16(blk[108:])
		y := dst[b*qkK : b*qkK+qkK]
		is, k := 0, 0
		m := uint8(1)
		for n := 0; n < qkK; n += 128 {
			q := qs[n/4 : n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					dl := d * float32(sc[is])
					is++
					for l := 16 * half; l < 16*half+16; l++ {
						v := int8((q[l] >> shift) & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						y[k] = dl * float32(v)
						k++
					}
				}
				m <<= 1
			}
		}
	}
}

func dequantQ4_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*144 : b*144+144]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qs := blk[4:16], blk[16:]
		y := dst[b*qkK : b*qkK+qkK]
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, scales)
			s2, m2 := scaleMinK4(2*j+1, scales)
			d1, dm1 := d*float32(s1), dmin*float32(m1)
			d2, dm2 := d*float32(s2), dmin*float32(m2)
			q := qs[32*j : 32*j+32]
			out := y[64*j : 64*j+64]
			for l := range 32 {
				out[l] = float32(d1*float32(q[l]&0x0f)) - dm1
				out[l+32] = float32(d2*float32(q[l]>>4)) - dm2
			}
		}
	}
}

func dequantQ5_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*176 : b*176+176]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:]
		y := dst[b*qkK : b*qkK+qkK]
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(2*j, scales)
			s2, m2 := scaleMinK4(2*j+1, scales)
			d1, dm1 := d*float32(s1), dmin*float32(m1)
			d2, dm2 := d*float32(s2), dmin*float32(m2)
			u1, u2 := uint8(1)<<(2*j), uint8(2)<<(2*j)
			q := qs[32*j : 32*j+32]
			out := y[64*j : 64*j+64]
			for l := range 32 {
				lo, hi := q[l]&0x0f, q[l]>>4
				if qh[l]&u1 != 0 {
					lo += 16
				}
				if qh[l]&u2 != 0 {
					hi += 16
				}
				out[l] = float32(d1*float32(lo)) - dm1
				out[l+32] = float32(d2*float32(hi)) - dm2
			}
		}
	}
}

func dequantQ6_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*210 : b*210+210]
		d := f16(blk[208:])
		y := dst[b*qkK : b*qkK+qkK]
		for n := 0; n < 2; n++ {
			ql := blk[64*n : 64*n+64]
			qh := blk[128+32*n : 128+32*n+32]
			sc := blk[192+8*n : 192+8*n+8]
			out := y[128*n : 128*n+128]
			for l := range 32 {
				is := l / 16
				q1 := int8(ql[l]&0x0f|(qh[l]>>0&3)<<4) - 32
				q2 := int8(ql[l+32]&0x0f|(qh[l]>>2&3)<<4) - 32
				q3 := int8(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int8(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				out[l] = d * float32(int8(sc[is])) * float32(q1)
				out[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				out[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				out[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

func dequantQ8_K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qkK; b++ {
		blk := src[b*292 : b*292+292]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		y := dst[b*qkK : b*qkK+qkK]
		for j := range y {
			y[j] = d * float32(int8(blk[4+j]))
		}
	}
}
