package kernels

import (
	"encoding/binary"
	"math"

	"fusion/engine/tensor"
)

func dotF32Generic(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dotF32BGeneric is dotF32Generic with the weight row as little-endian
// bytes, which need not be 4-byte aligned.
func dotF32BGeneric(x []float32, w []byte) float32 {
	w = w[:4*len(x)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		s0 += x[i] * math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
		s1 += x[i+1] * math.Float32frombits(binary.LittleEndian.Uint32(w[4*i+4:]))
	}
	for ; i < len(x); i++ {
		s0 += x[i] * math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:]))
	}
	return s0 + s1
}

func dotBF16Generic(x []float32, w []byte) float32 {
	w = w[:2*len(x)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		u := binary.LittleEndian.Uint32(w[2*i:])
		s0 += x[i] * math.Float32frombits(u<<16)
		s1 += x[i+1] * math.Float32frombits(u&0xffff0000)
	}
	for ; i < len(x); i++ {
		s0 += x[i] * tensor.BF16ToF32(binary.LittleEndian.Uint16(w[2*i:]))
	}
	return s0 + s1
}

func dotF16Generic(x []float32, w []byte) float32 {
	w = w[:2*len(x)]
	var s float32
	for i := range x {
		s += x[i] * tensor.F16ToF32(binary.LittleEndian.Uint16(w[2*i:]))
	}
	return s
}

func widenGeneric(dst []float32, src []byte, bf16 bool) {
	src = src[:2*len(dst)]
	for i := range dst {
		h := binary.LittleEndian.Uint16(src[2*i:])
		if bf16 {
			dst[i] = tensor.BF16ToF32(h)
		} else {
			dst[i] = tensor.F16ToF32(h)
		}
	}
}
