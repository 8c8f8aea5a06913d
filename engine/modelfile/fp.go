package modelfile

import (
	"fmt"
	"math"
	"slices"

	"fusion/engine/tensor"
)

// FP returns the format of a floating-point mode (mxfp4, mxfp8, nvfp4).
func FP(mode string) (tensor.FPFormat, error) {
	f, ok := tensor.FP(mode)
	if !ok {
		return f, fmt.Errorf("modelfile: %w: %q is not a floating-point quantization mode", ErrUnsupported, mode)
	}
	return f, nil
}

// DequantizeFP widens a [rows, cols] matrix in a floating-point mode to
// float32: packed is the uint32 codes' bytes, scales one byte per group.
// Every value code·scale is exact in float32, so this is bit-identical to
// mlx.core.dequantize(…, dtype=float32).
func DequantizeFP(mode string, packed, scales []byte, rows, cols int) ([]float32, error) {
	f, err := FP(mode)
	if err != nil {
		return nil, err
	}
	if cols%f.Group != 0 || len(packed) != rows*cols*f.Bits/8 || len(scales) != rows*cols/f.Group {
		return nil, fmt.Errorf("modelfile: %s: %d code bytes and %d scales for [%d, %d]", mode, len(packed), len(scales), rows, cols)
	}
	out := make([]float32, rows*cols)
	for i := range out {
		out[i] = f.Code(f.CodeAt(packed, i)) * f.Scale(scales[i/f.Group])
	}
	return out, nil
}

// QuantizeFP quantizes a row-major [rows, cols] matrix in a floating-point
// mode as mlx.core.quantize does for weights of dtype dt (BF16, F16 or
// F32: the values must be exact in it): each group's scale comes from its
// largest magnitude over the code's largest value, r, computed in dt —
// the power of two 2^round(log2 r) (log2 and its rounding to an integer,
// half to even, in dt too) for mxfp4/mxfp8, or r rounded to the nearest
// E4M3 for nvfp4 (ties to the even code) — and each value is rounded to
// the nearest code (an E4M3 tie to the even code, an E2M1 one to the
// smaller magnitude, as MLX does), saturating at the largest: a value can be up to √2 times
// the largest code at an E8M0 scale; a negative value rounded to zero is an
// E4M3 −0 but an E2M1 +0. An all-zero group is all zero codes
// at MLX's scale for it: 1, or 0 for nvfp4.
func QuantizeFP(mode string, dt tensor.DType, w []float32, rows, cols int) (packed, scales []byte, err error) {
	f, err := FP(mode)
	if err != nil {
		return nil, nil, err
	}
	if cols%f.Group != 0 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("modelfile: quantize %s: %d values for [%d, %d]", mode, len(w), rows, cols)
	}
	round, err := rounder(dt)
	if err != nil {
		return nil, nil, err
	}
	codes := positiveCodes(f)
	top := codes[len(codes)-1].v
	scales8 := scaleCodes(f)
	packed = make([]byte, rows*cols*f.Bits/8)
	scales = make([]byte, rows*cols/f.Group)
	for g := range scales {
		vals := w[g*f.Group : (g+1)*f.Group]
		var amax float32
		for _, v := range vals {
			amax = max(amax, abs32(v))
		}
		r := round(amax / top)
		if r == 0 {
			// An all-zero group: zero codes (already) at MLX's scale,
			// 2^0 or an E4M3 zero.
			if f.Mode != ModeNVFP4 {
				scales[g] = 127
			}
			continue
		}
		var sc fpCode
		switch {
		case f.Mode == ModeNVFP4:
			sc.c = nearest(scales8, r, false)
			sc.v = f.Scale(sc.c)
		default:
			e := math.RoundToEven(float64(round(float32(math.Log2(float64(r))))))
			sc.c = uint8(min(max(e+127, 0), 254))
			sc.v = f.Scale(sc.c)
		}
		scales[g] = sc.c
		for j, v := range vals {
			c := nearest(codes, abs32(v)/sc.v, f.Bits == 4)
			// The sign bit; MLX keeps it on an E4M3 zero (−0), not on
			// an E2M1 one.
			if math.Signbit(float64(v)) && (c != 0 || f.Bits == 8) {
				c |= 1 << (f.Bits - 1)
			}
			k := g*f.Group + j
			if f.Bits == 8 {
				packed[k] = c
			} else {
				packed[k/2] |= c << (4 * (k % 2))
			}
		}
	}
	return packed, scales, nil
}

// rounder rounds a float32 to the nearest value of dt (ties to even), as
// MLX's arithmetic in that dtype does to each result.
func rounder(dt tensor.DType) (func(float32) float32, error) {
	switch dt {
	case tensor.BF16:
		return func(x float32) float32 { return tensor.BF16ToF32(tensor.F32ToBF16(x)) }, nil
	case tensor.F16:
		return func(x float32) float32 { return tensor.F16ToF32(tensor.F32ToF16(x)) }, nil
	case tensor.F32:
		return func(x float32) float32 { return x }, nil
	}
	return nil, fmt.Errorf("modelfile: quantize: weights of dtype %s are not BF16, F16 or F32", dt)
}

// fpCode is a code and its value.
type fpCode struct {
	c uint8
	v float32
}

// positiveCodes are the format's non-negative finite codes, ascending.
func positiveCodes(f tensor.FPFormat) []fpCode {
	var out []fpCode
	for c := range 1 << (f.Bits - 1) {
		if v := f.Code(uint8(c)); !math.IsNaN(float64(v)) {
			out = append(out, fpCode{uint8(c), v})
		}
	}
	return out
}

// scaleCodes are the positive finite scales, ascending.
func scaleCodes(f tensor.FPFormat) []fpCode {
	var out []fpCode
	for c := range 256 {
		if v := f.Scale(uint8(c)); v > 0 && !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
			out = append(out, fpCode{uint8(c), v})
		}
	}
	slices.SortFunc(out, func(a, b fpCode) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(a, b fpCode) bool { return a.v == b.v })
}

// nearest is the code nearest to x ≥ 0 (beyond the largest, the
// largest); a tie goes to the even code, or with down to the smaller one
// (MLX's E2M1 rounding: 1.75 becomes 1.5, 0.75 becomes 0.5).
func nearest(codes []fpCode, x float32, down bool) uint8 {
	i, _ := slices.BinarySearchFunc(codes, x, func(c fpCode, t float32) int {
		switch {
		case c.v < t:
			return -1
		case c.v > t:
			return 1
		}
		return 0
	})
	if i == len(codes) {
		return codes[len(codes)-1].c
	}
	if i == 0 || codes[i].v == x {
		return codes[i].c
	}
	lo, hi := codes[i-1], codes[i]
	switch d := (x - lo.v) - (hi.v - x); {
	case d < 0:
		return lo.c
	case d > 0:
		return hi.c
	}
	if down || lo.c%2 == 0 {
		return lo.c
	}
	return hi.c
}
