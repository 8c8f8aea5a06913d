package tensor

import "math"

// The small floating-point formats of MLX's mxfp4, mxfp8 and nvfp4
// quantization modes (the OCP microscaling formats and NVIDIA's FP4):
// element codes E2M1 (4 bits) and E4M3 (8 bits), scales E8M0 (a power of
// two) and E4M3.

// e2m1 is the magnitude of each E2M1 code without its sign bit (2
// exponent bits, 1 mantissa bit).
var e2m1 = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// E2M1ToF32 decodes the low 4 bits of c (bit 3 the sign: code 8 is −0).
func E2M1ToF32(c uint8) float32 {
	v := e2m1[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// E4M3ToF32 decodes an FP8 E4M3 value (the "fn" variant: exponent bias 7,
// no infinities, 0x7f and 0xff are NaN, exponent 0 subnormal).
func E4M3ToF32(c uint8) float32 {
	exp, man := int(c>>3)&15, float64(c&7)
	var v float64
	switch {
	case exp == 15 && c&7 == 7:
		return float32(math.NaN())
	case exp == 0:
		v = man / 8 * math.Ldexp(1, -6)
	default:
		v = (1 + man/8) * math.Ldexp(1, exp-7)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// E8M0ToF32 decodes an E8M0 scale: 2^(c−127); 0xff is NaN. Scales of
// 2^−127 are float32 subnormals, still exact.
func E8M0ToF32(c uint8) float32 {
	if c == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(c)-127))
}

// FPFormat is how one of MLX's floating-point quantization modes stores a
// matrix: codes of Bits bits (E2M1 or E4M3) packed little-endian in uint32
// words, low bits first, and one uint8 scale per Group values (E8M0, or
// E4M3 for nvfp4): w = code·scale.
type FPFormat struct {
	Mode        string
	Bits, Group int
}

// FP returns the format of mode "mxfp4", "mxfp8" or "nvfp4".
func FP(mode string) (FPFormat, bool) {
	switch mode {
	case "mxfp4":
		return FPFormat{mode, 4, 32}, true
	case "mxfp8":
		return FPFormat{mode, 8, 32}, true
	case "nvfp4":
		return FPFormat{mode, 4, 16}, true
	}
	return FPFormat{}, false
}

// Code decodes one element code.
func (f FPFormat) Code(c uint8) float32 {
	if f.Bits == 8 {
		return E4M3ToF32(c)
	}
	return E2M1ToF32(c)
}

// Scale decodes one group scale.
func (f FPFormat) Scale(s uint8) float32 {
	if f.Mode == "nvfp4" {
		return E4M3ToF32(s)
	}
	return E8M0ToF32(s)
}

// CodeAt is the code of element i of a row of packed codes.
func (f FPFormat) CodeAt(packed []byte, i int) uint8 {
	if f.Bits == 8 {
		return packed[i]
	}
	return packed[i/2] >> (4 * (i % 2)) & 15
}
