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
// mode: each group's scale is the smallest scale (a power of two, or an
// E4M3 value for nvfp4) at which the group's largest magnitude fits the
// code's range, and each value is rounded to the nearest code (ties to
// the even code). MLX's own quantizer may choose scales differently; any
// valid codes load the same way.
func QuantizeFP(mode string, w []float32, rows, cols int) (packed, scales []byte, err error) {
	f, err := FP(mode)
	if err != nil {
		return nil, nil, err
	}
	if cols%f.Group != 0 || len(w) != rows*cols {
		return nil, nil, fmt.Errorf("modelfile: quantize %s: %d values for [%d, %d]", mode, len(w), rows, cols)
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
		// The smallest scale s with amax/s ≤ top.
		i, _ := slices.BinarySearchFunc(scales8, amax/top, func(c fpCode, t float32) int {
			switch {
			case c.v < t:
				return -1
			case c.v > t:
				return 1
			}
			return 0
		})
		sc := scales8[min(i, len(scales8)-1)]
		scales[g] = sc.c
		for j, v := range vals {
			c := nearest(codes, abs32(v)/sc.v)
			if v < 0 && c != 0 {
				c |= 1 << (f.Bits - 1) // the sign bit
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

// nearest is the code nearest to x ≥ 0 (ties to the even code; beyond
// the largest, the largest).
func nearest(codes []fpCode, x float32) uint8 {
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
	if lo.c%2 == 0 {
		return lo.c
	}
	return hi.c
}
