package kernels

// Row kernels of the K-quant types that real Q4_K_M, Q3_K_M and Q2_K
// files mix in beside Q4_K and Q6_K: Q5_K, Q3_K and Q2_K (AVX2 versions in
// gguf_amd64.s, one row at a time, without the 4-row and many-row
// variants Q4_K and Q6_K have). Each is a dot over 32-element activation
// blocks: integer sums of weight code × activation code inside a block,
// one float scale per block, as q4KGeneric does.
//
// Element e of a Q2_K or Q3_K super-block has its scale at e/16, its two
// bits in byte 32·(e/128) + e%32 at shift 2·((e%128)/32), and (Q3_K) its
// high bit in hmask byte e%32, bit e/32: activation block j (elements
// 32j..32j+31) reads 32 consecutive code bytes at one shift.

const (
	q2KBytes = 84  // scales[16] (4-bit scale | 4-bit min << 4), qs[64], fp16 d, fp16 dmin
	q3KBytes = 110 // hmask[32], qs[64], 12 bytes of 6-bit scales, fp16 d
	q5KBytes = 176 // fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, qh[32], qs[128]
)

// q3KScales unpacks the sixteen 6-bit scales of a Q3_K block, minus 32:
// low nibbles in bytes 0–7 (scales 0–7 low, 8–15 high), the top two
// bits of scale j in byte 8 + j%4 at shift 2·(j/4).
func q3KScales(s []byte) [16]int32 {
	var out [16]int32
	for j := range 16 {
		lo := s[j%8] >> (4 * (j / 8)) & 15
		hi := s[8+j%4] >> (2 * (j / 4)) & 3
		out[j] = int32(lo|hi<<4) - 32
	}
	return out
}

func q2KGeneric(a q8Row, w []byte) float32 {
	var sum float32
	for sb := 0; sb < len(a.q)/kBlock; sb++ {
		blk := w[sb*q2KBytes : (sb+1)*q2KBytes]
		scales, qs := blk[:16], blk[16:80]
		d, dmin := f16(blk[80:]), f16(blk[82:])
		var fs, fm float32
		for j := 0; j < 8; j++ {
			b := sb*8 + j
			xq := a.q[b*32 : b*32+32]
			q := qs[32*(j/4) : 32*(j/4)+32]
			shift := uint(2 * (j % 4))
			var is, xs [2]int32 // per 16: Σ q·xq and Σ xq
			for l, v := range q {
				x := int32(xq[l])
				is[l/16] += int32(v>>shift&3) * x
				xs[l/16] += x
			}
			s0, s1 := scales[2*j], scales[2*j+1]
			fs += a.d[b] * float32(int32(s0&15)*is[0]+int32(s1&15)*is[1])
			fm += a.d[b] * float32(int32(s0>>4)*xs[0]+int32(s1>>4)*xs[1])
		}
		sum += d*fs - dmin*fm
	}
	return sum
}

func q3KGeneric(a q8Row, w []byte) float32 {
	var sum float32
	for sb := 0; sb < len(a.q)/kBlock; sb++ {
		blk := w[sb*q3KBytes : (sb+1)*q3KBytes]
		hm, qs := blk[:32], blk[32:96]
		sc := q3KScales(blk[96:108])
		d := f16(blk[108:])
		var fs float32
		for j := 0; j < 8; j++ {
			b := sb*8 + j
			xq := a.q[b*32 : b*32+32]
			q := qs[32*(j/4) : 32*(j/4)+32]
			shift := uint(2 * (j % 4))
			var is [2]int32
			for l, v := range q {
				c := int32(v >> shift & 3)
				if hm[l]>>j&1 == 0 {
					c -= 4
				}
				is[l/16] += c * int32(xq[l])
			}
			fs += a.d[b] * float32(sc[2*j]*is[0]+sc[2*j+1]*is[1])
		}
		sum += d * fs
	}
	return sum
}

func q5KGeneric(a q8Row, w []byte) float32 {
	var sum float32
	for sb := 0; sb < len(a.q)/kBlock; sb++ {
		blk := w[sb*q5KBytes : (sb+1)*q5KBytes]
		d, dmin := f16(blk), f16(blk[2:])
		sc, mn := kScaleMin(blk[4:16])
		qh, qs := blk[16:48], blk[48:176]
		var fs, fm float32
		for j := 0; j < 4; j++ {
			b := sb*8 + 2*j
			xlo := a.q[b*32 : b*32+32]
			xhi := a.q[b*32+32 : b*32+64]
			q := qs[32*j : 32*j+32]
			var ilo, ihi int32
			for l, v := range q {
				h := int32(qh[l] >> (2 * j))
				ilo += (int32(v&15) | (h&1)<<4) * int32(xlo[l])
				ihi += (int32(v>>4) | (h>>1&1)<<4) * int32(xhi[l])
			}
			fs += a.d[b]*float32(int32(sc[2*j])*ilo) + a.d[b+1]*float32(int32(sc[2*j+1])*ihi)
			fm += float32(mn[2*j])*a.s[b] + float32(mn[2*j+1])*a.s[b+1]
		}
		sum += d*fs - dmin*fm
	}
	return sum
}
