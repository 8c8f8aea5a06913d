package gguf

import "encoding/binary"

// The 32-element block types. Layouts (ggml-common.h):
//
//	Q8_0: d f16, qs [32]int8                      y = d·q
//	Q4_0: d f16, qs [16]byte                      y = d·(q−8)
//	Q4_1: d f16, m f16, qs [16]byte               y = d·q + m
//	Q5_0: d f16, qh u32, qs [16]byte              y = d·(q−16)
//	Q5_1: d f16, m f16, qh u32, qs [16]byte       y = d·q + m
//
// 4-bit quants: byte j holds element j in its low nibble and element j+16
// in its high nibble; the fifth bit of element j is bit j of qh.

const qk = 32 // elements per legacy block

func dequantQ8_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qk; b++ {
		blk := src[b*34 : b*34+34]
		d := f16(blk)
		y := dst[b*qk : b*qk+qk]
		for j := range y {
			y[j] = float32(int8(blk[2+j])) * d
		}
	}
}

func dequantQ4_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qk; b++ {
		blk := src[b*18 : b*18+18]
		d := f16(blk)
		qs := blk[2:]
		y := dst[b*qk : b*qk+qk]
		for j := range qk / 2 {
			y[j] = float32(int(qs[j]&0x0f)-8) * d
			y[j+qk/2] = float32(int(qs[j]>>4)-8) * d
		}
	}
}

func dequantQ4_1(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qk; b++ {
		blk := src[b*20 : b*20+20]
		d, m := f16(blk), f16(blk[2:])
		qs := blk[4:]
		y := dst[b*qk : b*qk+qk]
		for j := range qk / 2 {
			y[j] = float32(float32(qs[j]&0x0f)*d) + m
			y[j+qk/2] = float32(float32(qs[j]>>4)*d) + m
		}
	}
}

func dequantQ5_0(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qk; b++ {
		blk := src[b*22 : b*22+22]
		d := f16(blk)
		qh := binary.LittleEndian.Uint32(blk[2:])
		qs := blk[6:]
		y := dst[b*qk : b*qk+qk]
		for j := range qk / 2 {
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(int(qs[j]&0x0f|h0)-16) * d
			y[j+qk/2] = float32(int(qs[j]>>4|h1)-16) * d
		}
	}
}

func dequantQ5_1(src []byte, dst []float32) {
	for b := 0; b < len(dst)/qk; b++ {
		blk := src[b*24 : b*24+24]
		d, m := f16(blk), f16(blk[2:])
		qh := binary.LittleEndian.Uint32(blk[4:])
		qs := blk[8:]
		y := dst[b*qk : b*qk+qk]
		for j := range qk / 2 {
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			y[j] = float32(float32(qs[j]&0x0f|h0)*d) + m
			y[j+qk/2] = float32(float32(qs[j]>>4|h1)*d) + m
		}
	}
}
