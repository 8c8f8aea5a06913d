//go:build cgo

package mlx

import (
	"encoding/binary"
	"math"

	"fusion/engine/tensor"
)

// ggufGroup is the block size of Q8_0 and Q4_0: one MLX affine group.
const ggufGroup = 32

// affineCodes is a matrix in MLX's affine layout made from GGUF blocks:
// codes packed LSB-first into little-endian uint32 words, float32 scales
// and biases per group of ggufGroup.
type affineCodes struct {
	codes, scales, biases []byte
	bits                  int
}

// ggufAffine maps a Q8_0 or Q4_0 matrix [out, in] (checked by
// kernels.NewGGUF) to MLX affine codes that dequantize to exactly the
// CPU kernels' values: a block d·q with q signed (Q8_0: int8; Q4_0:
// nibble − 8) becomes codes q + 128 (or the nibble) with scale d and bias
// −128·d (or −8·d). In float32, code·d is exact (11 + 8 bits) and so is
// code·d − 128·d = q·d, whichever way MLX rounds the product and the sum
// (only a zero scale differs: +0 where the CPU's 0·q gives −0 for q < 0).
// It reports false for other types and for blocks whose d is not finite
// (whose products the two layouts would not give alike).
func ggufAffine(dt tensor.DType, out, in int, data []byte) (affineCodes, bool) {
	var bits, blockBytes int
	var offset float32
	switch dt {
	case tensor.Q8_0:
		bits, blockBytes, offset = 8, 34, 128
	case tensor.Q4_0:
		bits, blockBytes, offset = 4, 18, 8
	default:
		return affineCodes{}, false
	}
	blocks := out * in / ggufGroup
	a := affineCodes{bits: bits, codes: make([]byte, out*in*bits/8), scales: make([]byte, 4*blocks), biases: make([]byte, 4*blocks)}
	for b := range blocks {
		blk := data[b*blockBytes : (b+1)*blockBytes]
		d := tensor.F16ToF32(binary.LittleEndian.Uint16(blk))
		if math.IsInf(float64(d), 0) || math.IsNaN(float64(d)) {
			return affineCodes{}, false
		}
		binary.LittleEndian.PutUint32(a.scales[4*b:], math.Float32bits(d))
		binary.LittleEndian.PutUint32(a.biases[4*b:], math.Float32bits(-offset*d))
		q := a.codes[b*ggufGroup*bits/8:]
		if bits == 8 {
			for i, v := range blk[2:] {
				q[i] = v ^ 0x80 // int8 + 128
			}
			continue
		}
		// Q4_0: element i < 16 is byte i's low nibble, element 16+i its
		// high one; MLX packs element 2j in byte j's low nibble.
		nib := func(e int) byte {
			if e < 16 {
				return blk[2+e] & 15
			}
			return blk[2+e-16] >> 4
		}
		for j := range ggufGroup / 2 {
			q[j] = nib(2*j) | nib(2*j+1)<<4
		}
	}
	return a, true
}
