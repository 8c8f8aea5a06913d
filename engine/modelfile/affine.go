package modelfile

import (
	"fmt"
	"math"
)

// PackedCols is the number of uint32 words one row of cols b-bit values
// occupies (cols·bits/32; cols is a multiple of 32 whenever it is a
// multiple of a valid group size).
func PackedCols(cols, bits int) int { return cols * bits / 32 }

// QuantizeAffine quantizes a row-major [rows, cols] matrix the way
// mlx.core.quantize does in affine mode on the CPU, in float32: per group
// of groupSize values along a row, with n = 2^bits − 1,
//
//	scale = max((max − min)/n, 1e-7), negated unless |min| > |max|
//	edge  = min if |min| > |max| else max
//	q0    = rint(edge/scale); if q0 ≠ 0 { scale = edge/q0; bias = edge } else bias = 0
//	q     = clamp(rint((w − bias)/scale), 0, n)
//
// so that the edge of larger magnitude is reproduced exactly. rint rounds
// half to even. Values are packed little-endian along the row, value i at
// bits [i·bits, (i+1)·bits) of the row's bit stream (3-, 5- and 6-bit
// values straddle word boundaries). Scales and biases come back in float32;
// MLX then stores them in the weight's dtype.
func QuantizeAffine(w []float32, rows, cols, groupSize, bits int) (packed []uint32, scales, biases []float32, err error) {
	if err := checkMatrix(rows, cols, groupSize, bits); err != nil {
		return nil, nil, nil, err
	}
	if len(w) != rows*cols {
		return nil, nil, nil, fmt.Errorf("modelfile: quantize: %d values for a [%d, %d] matrix", len(w), rows, cols)
	}
	nBins := float32(int(1)<<bits - 1)
	groups := cols / groupSize
	packed = make([]uint32, rows*PackedCols(cols, bits))
	scales = make([]float32, rows*groups)
	biases = make([]float32, rows*groups)
	for g := range rows * groups {
		vals := w[g*groupSize : (g+1)*groupSize]
		lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
		for _, v := range vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		useMin := abs32(lo) > abs32(hi)
		scale := max((hi-lo)/nBins, 1e-7)
		edge := hi
		if useMin {
			edge = lo
		} else {
			scale = -scale
		}
		q0 := rint32(edge / scale)
		var bias float32
		if q0 != 0 {
			scale = edge / q0
			bias = edge
		}
		scales[g], biases[g] = scale, bias
		base := g * groupSize * bits // bit offset of the group in the matrix stream
		for j, v := range vals {
			q := min(max(rint32((v-bias)/scale), 0), nBins)
			putBits(packed, base+j*bits, bits, uint32(q))
		}
	}
	return packed, scales, biases, nil
}

// DequantizeAffine expands a packed [rows, cols] matrix to float32:
// w = q·scale + bias, computed in float32 (one rounding for the product,
// one for the sum). scales and biases are [rows, cols/groupSize].
func DequantizeAffine(packed []uint32, scales, biases []float32, rows, cols, groupSize, bits int) ([]float32, error) {
	if err := checkMatrix(rows, cols, groupSize, bits); err != nil {
		return nil, err
	}
	groups := cols / groupSize
	if len(packed) != rows*PackedCols(cols, bits) || len(scales) != rows*groups || len(biases) != rows*groups {
		return nil, fmt.Errorf("modelfile: dequantize: %d words, %d scales, %d biases do not describe a [%d, %d] %d-bit matrix in groups of %d",
			len(packed), len(scales), len(biases), rows, cols, bits, groupSize)
	}
	out := make([]float32, rows*cols)
	for i := range out {
		g := i / groupSize
		q := float32(getBits(packed, i*bits, bits))
		out[i] = float32(q*scales[g]) + biases[g]
	}
	return out, nil
}

// UnpackAffine returns the quantized integers of a packed bit stream:
// n values of the given width starting at value index first.
func UnpackAffine(packed []uint32, bits, first, n int) []uint8 {
	out := make([]uint8, n)
	for i := range out {
		out[i] = uint8(getBits(packed, (first+i)*bits, bits))
	}
	return out
}

func checkMatrix(rows, cols, groupSize, bits int) error {
	if err := CheckAffine(groupSize, bits); err != nil {
		return fmt.Errorf("modelfile: %w", err)
	}
	if rows <= 0 || cols <= 0 || cols%groupSize != 0 {
		return fmt.Errorf("modelfile: %w: a [%d, %d] matrix cannot be quantized in groups of %d", ErrBadLinear, rows, cols, groupSize)
	}
	return nil
}

// putBits ORs the low width bits of v into the little-endian bit stream at
// bit offset pos (the destination bits must be zero).
func putBits(words []uint32, pos, width int, v uint32) {
	w, s := pos/32, pos%32
	words[w] |= v << s
	if s+width > 32 {
		words[w+1] |= v >> (32 - s)
	}
}

// getBits reads width bits at bit offset pos of the stream.
func getBits(words []uint32, pos, width int) uint32 {
	w, s := pos/32, pos%32
	v := words[w] >> s
	if s+width > 32 {
		v |= words[w+1] << (32 - s)
	}
	return v & (1<<width - 1)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// rint32 rounds half to even, as C's rint in the default rounding mode.
func rint32(v float32) float32 { return float32(math.RoundToEven(float64(v))) }
