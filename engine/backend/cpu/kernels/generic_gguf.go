package kernels

import (
	"encoding/binary"

	"fusion/engine/tensor"
)

// Block sizes in bytes of the GGUF formats.
const (
	q8_0Bytes = 34  // fp16 d, int8 q[32]
	q4_0Bytes = 18  // fp16 d, q[16] nibbles: low = elements 0..15, high = 16..31
	q4KBytes  = 144 // fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, q[128] nibbles
	q6KBytes  = 210 // ql[128], qh[64], int8 scales[16], fp16 d
	kBlock    = 256 // elements per K-quant super-block
)

func f16(b []byte) float32 { return tensor.F16ToF32(binary.LittleEndian.Uint16(b)) }

func q8_0Generic(a q8Row, w []byte) float32 {
	var sum float32
	for b, dx := range a.d {
		blk := w[b*q8_0Bytes : (b+1)*q8_0Bytes]
		xq := a.q[b*32 : b*32+32]
		var isum int32
		for i, v := range blk[2:34] {
			isum += int32(int8(v)) * int32(xq[i])
		}
		sum += f16(blk) * dx * float32(isum)
	}
	return sum
}

func q4_0Generic(a q8Row, w []byte) float32 {
	var sum float32
	for b, dx := range a.d {
		blk := w[b*q4_0Bytes : (b+1)*q4_0Bytes]
		xq := a.q[b*32 : b*32+32]
		var isum int32
		for i, v := range blk[2:18] {
			isum += (int32(v&15)-8)*int32(xq[i]) + (int32(v>>4)-8)*int32(xq[i+16])
		}
		sum += f16(blk) * dx * float32(isum)
	}
	return sum
}

// kScaleMin unpacks the eight 6-bit scales and mins of a Q4_K/Q5_K block
// (ggml's get_scale_min_k4 for j = 0..7).
func kScaleMin(p []byte) (sc, mn [8]uint8) {
	p = p[:12]
	for j := 0; j < 4; j++ {
		sc[j] = p[j] & 63
		mn[j] = p[j+4] & 63
		sc[j+4] = p[j+8]&15 | (p[j]>>6)<<4
		mn[j+4] = p[j+8]>>4 | (p[j+4]>>6)<<4
	}
	return sc, mn
}

func q4KGeneric(a q8Row, w []byte) float32 {
	var sum float32
	for sb := 0; sb < len(a.q)/kBlock; sb++ {
		blk := w[sb*q4KBytes : (sb+1)*q4KBytes]
		d, dmin := f16(blk), f16(blk[2:])
		sc, mn := kScaleMin(blk[4:16])
		qs := blk[16:144]
		var fs, fm float32
		for j := 0; j < 4; j++ {
			b := sb*8 + 2*j
			xlo := a.q[b*32 : b*32+32]
			xhi := a.q[b*32+32 : b*32+64]
			q := qs[32*j : 32*j+32]
			var ilo, ihi int32
			for l, v := range q {
				ilo += int32(v&15) * int32(xlo[l])
				ihi += int32(v>>4) * int32(xhi[l])
			}
			fs += a.d[b]*float32(int32(sc[2*j])*ilo) + a.d[b+1]*float32(int32(sc[2*j+1])*ihi)
			fm += float32(mn[2*j])*a.s[b] + float32(mn[2*j+1])*a.s[b+1]
		}
		sum += d*fs - dmin*fm
	}
	return sum
}

func q6KGeneric(a q8Row, w []byte) float32 {
	var sum float32
	for sb := 0; sb < len(a.q)/kBlock; sb++ {
		blk := w[sb*q6KBytes : (sb+1)*q6KBytes]
		d := f16(blk[208:])
		var fs float32
		for n := 0; n < 2; n++ {
			ql := blk[64*n : 64*n+64]
			qh := blk[128+32*n : 128+32*n+32]
			sc := blk[192+8*n : 192+8*n+8]
			var is [8]int32 // per 16 elements: Σ (q-32)·xq
			base := sb*kBlock + 128*n
			xq := a.q[base : base+128]
			for l := 0; l < 32; l++ {
				h := l / 16
				q1 := int32(ql[l]&15|(qh[l]&3)<<4) - 32
				q2 := int32(ql[l+32]&15|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6)<<4) - 32
				is[h] += q1 * int32(xq[l])
				is[2+h] += q2 * int32(xq[l+32])
				is[4+h] += q3 * int32(xq[l+64])
				is[6+h] += q4 * int32(xq[l+96])
			}
			for k := 0; k < 4; k++ {
				isum := int32(int8(sc[2*k]))*is[2*k] + int32(int8(sc[2*k+1]))*is[2*k+1]
				fs += a.d[base/32+k] * float32(isum)
			}
		}
		sum += d * fs
	}
	return sum
}
