package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BF16ToF32 widens a bfloat16 bit pattern; exact.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows with round-to-nearest-even, as PyTorch and MLX do; NaN
// stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE 754 half-precision bit pattern; exact.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: normalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// F32ToF16 narrows with round-to-nearest-even, handling subnormals,
// overflow to infinity and NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := man & (1<<shift - 1)
		m := man >> shift
		if rest > half || (rest == half && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	m := man >> 13
	rest := man & 0x1fff
	out := uint32(e)<<10 | m
	if rest > 0x1000 || (rest == 0x1000 && m&1 == 1) {
		out++ // may carry into the exponent, which is correct rounding
	}
	return sign | uint16(out)
}

// Floats widens an F32, F16 or BF16 tensor to float32 values (a new slice).
func Floats(t Tensor) ([]float32, error) {
	d := t.Data
	switch t.DType {
	case F32:
		out := make([]float32, len(d)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case F16, BF16:
		conv := BF16ToF32
		if t.DType == F16 {
			conv = F16ToF32
		}
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = conv(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %s: cannot widen %v to float32", t.Name, t.DType)
}

// Encode stores float32 values as dt's little-endian bytes: BF16 and F16
// rounded to nearest even, anything else as F32 (Floats' inverse).
func Encode(dt DType, vals []float32) []byte {
	switch dt {
	case BF16, F16:
		conv := F32ToBF16
		if dt == F16 {
			conv = F32ToF16
		}
		b := make([]byte, 2*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint16(b[2*i:], conv(v))
		}
		return b
	}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
