package gguf

import (
	"fmt"
	"math"
)

// ggml's MXFP4 (type 39), the type llama.cpp's converter gives gpt-oss's
// experts: blocks of 17 bytes for 32 values, one E8M0 exponent byte e then
// 16 bytes of E2M1 codes, element j (< 16) in byte j's low nibble and
// element j+16 in its high nibble. ggml decodes a code through
// kvalues_mxfp4 (E2M1 values doubled: 0, 1, 2, 3, 4, 6, 8, 12 and their
// negatives, code 8 being +0) times half the scale, 2^(e−128) — for e < 2 a
// float32 subnormal, and for e = 255 2^127 (not NaN). That is the OCP
// value E2M1(code)·2^(e−127), which is how MLX's mxfp4 mode stores the
// same numbers with its codes in order and its scales apart: MXFP4ToMLX
// and MXFP4FromMLX move between the two layouts without changing a value.

const (
	mxfp4Block      = 32
	mxfp4BlockBytes = 17
)

// mxfp4Values are ggml's kvalues_mxfp4.
var mxfp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// mxfp4HalfScale is ggml's ggml_e8m0_to_fp32_half: 2^(e−128) as a float32.
func mxfp4HalfScale(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

func dequantMXFP4(src []byte, dst []float32) {
	for b := range len(dst) / mxfp4Block {
		blk := src[b*mxfp4BlockBytes : (b+1)*mxfp4BlockBytes]
		d := mxfp4HalfScale(blk[0])
		y := dst[b*mxfp4Block : (b+1)*mxfp4Block]
		for j, q := range blk[1:] {
			y[j] = d * float32(mxfp4Values[q&15])
			y[j+16] = d * float32(mxfp4Values[q>>4])
		}
	}
}

// MXFP4ToMLX rearranges ggml MXFP4 blocks (a whole number of them) into
// MLX's mxfp4 layout: codes packed in element order, two to a byte (low
// nibble first: as little-endian uint32 words, eight codes each) and one
// E8M0 scale byte per 32 values. Each value is unchanged, but for a scale
// byte of 255, which ggml reads as 2^127 and MLX as NaN: it is refused.
func MXFP4ToMLX(blocks []byte) (codes, scales []byte, err error) {
	if len(blocks)%mxfp4BlockBytes != 0 {
		return nil, nil, fmt.Errorf("gguf: %d bytes are not whole MXFP4 blocks", len(blocks))
	}
	n := len(blocks) / mxfp4BlockBytes
	codes, scales = make([]byte, n*mxfp4Block/2), make([]byte, n)
	for b := range n {
		blk := blocks[b*mxfp4BlockBytes : (b+1)*mxfp4BlockBytes]
		if blk[0] == 0xff {
			return nil, nil, fmt.Errorf("gguf: MXFP4 block %d has scale byte 255 (2^127 in ggml, NaN in MXFP4 proper)", b)
		}
		scales[b] = blk[0]
		q := codes[b*mxfp4Block/2 : (b+1)*mxfp4Block/2]
		// Element i is nibble i&1 of output byte i/2; elements j and
		// j+16 share input byte j.
		for j := range 8 {
			lo, hi := blk[1+2*j], blk[2+2*j]
			q[j] = lo&15 | hi<<4     // elements 2j, 2j+1
			q[8+j] = lo>>4 | hi&0xf0 // elements 16+2j, 17+2j
		}
	}
	return codes, scales, nil
}

// MXFP4FromMLX is MXFP4ToMLX's inverse: MLX mxfp4 codes (in element order,
// low nibble first) and their E8M0 scales, one per 32 values, as ggml
// MXFP4 blocks — what llama.cpp's converter does to gpt-oss's checkpoint
// blocks.
func MXFP4FromMLX(codes, scales []byte) ([]byte, error) {
	n := len(scales)
	if len(codes) != n*mxfp4Block/2 {
		return nil, fmt.Errorf("gguf: %d bytes of MXFP4 codes for %d scales, want %d", len(codes), n, n*mxfp4Block/2)
	}
	out := make([]byte, n*mxfp4BlockBytes)
	for b := range n {
		blk := out[b*mxfp4BlockBytes : (b+1)*mxfp4BlockBytes]
		blk[0] = scales[b]
		q := codes[b*mxfp4Block/2 : (b+1)*mxfp4Block/2]
		for j := range 8 {
			lo, hi := q[j], q[8+j] // elements 2j, 2j+1 and 16+2j, 17+2j
			blk[1+2*j] = lo&15 | hi<<4
			blk[2+2*j] = lo>>4 | hi&0xf0
		}
	}
	return out, nil
}

// quantBlockMXFP4 is ggml's quantize_row_mxfp4_ref for one block of 32
// (gguf.quants' MXFP4.quantize_blocks too): the exponent e = ⌊log2 amax⌋
// − 2 + 127 (0 for an all-zero block), so amax falls within [8, 16) half
// scales and the largest code (12) may clip it, then each value the first
// of kvalues_mxfp4 nearest to it in half scales, the products and
// differences rounded to float32 one by one. log2 is rounded to float32
// before the floor, as log2f (and numpy's float32 log2) does.
//
//go:norace
func quantBlockMXFP4(x []float32, y []byte) {
	var amax float32
	for _, v := range x[:mxfp4Block] {
		amax = max(amax, abs32(v))
	}
	var e uint8
	if amax > 0 {
		e = uint8(int32(math.Floor(float64(float32(math.Log2(float64(amax)))))) - 2 + 127)
	}
	d := mxfp4HalfScale(e)
	y[0] = e
	best := func(v float32) byte {
		bi, be := 0, abs32(float32(d*float32(mxfp4Values[0]))-v)
		for i := 1; i < 16; i++ {
			if err := abs32(float32(d*float32(mxfp4Values[i])) - v); err < be {
				bi, be = i, err
			}
		}
		return byte(bi)
	}
	for j := range mxfp4Block / 2 {
		y[1+j] = best(x[j]) | best(x[j+16])<<4
	}
}
