package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"fusion/engine/tensor"
	"fusion/internal/race"
)

// Quantizable reports whether Quantize supports dt.
func Quantizable(dt tensor.DType) bool {
	switch dt {
	case tensor.F32, tensor.F16, tensor.BF16,
		tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1,
		tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K,
		tensor.MXFP4:
		return true
	}
	return false
}

// QuantizeRow encodes src, a whole number of dt blocks, into dst, which
// must be exactly their size. The block types follow ggml's reference
// quantizers (quantize_row_*_ref, the ones llama-quantize uses without an
// importance matrix) operation for operation and produce the same bytes:
// the tests compare the legacy types with the gguf Python package and,
// opt-in, every type with llama.cpp's own ggml.
func QuantizeRow(dt tensor.DType, src []float32, dst []byte) error {
	if !Quantizable(dt) {
		return fmt.Errorf("gguf: cannot quantize to %v", dt)
	}
	size, err := dt.ByteSize(int64(len(src)))
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if int64(len(dst)) != size {
		return fmt.Errorf("gguf: %d %v elements take %d bytes, destination has %d", len(src), dt, size, len(dst))
	}
	race.ReadRange(src)
	race.WriteRange(dst)
	quantizeBlocks(dt, src, dst)
	return nil
}

// quantizeBlocks is QuantizeRow's loop, uninstrumented under -race as are
// the block quantizers it calls (//go:norace): they read src and write
// dst, both declared to the detector by QuantizeRow, and otherwise touch
// only their own stack. Instrumented, they were most of the CPU time of
// the GGUF export tests under -race.
//
//go:norace
func quantizeBlocks(dt tensor.DType, src []float32, dst []byte) {
	n := dt.BlockElems()
	bb := dt.BlockBytes()
	for b := 0; b < len(src)/n; b++ {
		x, y := src[b*n:(b+1)*n], dst[b*bb:(b+1)*bb]
		switch dt {
		case tensor.F32:
			binary.LittleEndian.PutUint32(y, math.Float32bits(x[0]))
		case tensor.F16:
			binary.LittleEndian.PutUint16(y, tensor.F32ToF16(x[0]))
		case tensor.BF16:
			binary.LittleEndian.PutUint16(y, tensor.F32ToBF16(x[0]))
		case tensor.Q8_0:
			quantBlockQ8_0(x, y)
		case tensor.Q4_0:
			quantBlockQ4_0(x, y)
		case tensor.Q4_1:
			quantBlockQ4_1(x, y)
		case tensor.Q5_0:
			quantBlockQ5_0(x, y)
		case tensor.Q5_1:
			quantBlockQ5_1(x, y)
		case tensor.Q2_K:
			quantBlockQ2_K(x, y)
		case tensor.Q3_K:
			quantBlockQ3_K(x, y)
		case tensor.Q4_K:
			quantBlockQ4_K(x, y)
		case tensor.Q5_K:
			quantBlockQ5_K(x, y)
		case tensor.Q6_K:
			quantBlockQ6_K(x, y)
		case tensor.MXFP4:
			quantBlockMXFP4(x, y)
		}
	}
}

// Quantize returns src encoded as dt; len(src) must be a whole number of
// blocks (for a tensor, rows are a whole number of blocks each, so its
// elements can be quantized in one go).
func Quantize(dt tensor.DType, src []float32) ([]byte, error) {
	size, err := dt.ByteSize(int64(len(src)))
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	dst := make([]byte, size)
	return dst, QuantizeRow(dt, src, dst)
}

// QuantizeTensor quantizes float32 data of the given shape (outermost
// first) into a tensor ready for Write.
func QuantizeTensor(name string, dt tensor.DType, shape []int64, data []float32) (WriteTensor, error) {
	n, err := tensor.NumElements(shape)
	if err != nil {
		return WriteTensor{}, fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	if int64(len(data)) != n {
		return WriteTensor{}, fmt.Errorf("gguf: tensor %q: shape %v needs %d values, got %d", name, shape, n, len(data))
	}
	if len(shape) == 0 || shape[len(shape)-1]%int64(dt.BlockElems()) != 0 {
		return WriteTensor{}, fmt.Errorf("gguf: tensor %q: rows of shape %v are not whole %v blocks", name, shape, dt)
	}
	b, err := Quantize(dt, data)
	if err != nil {
		return WriteTensor{}, fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	return WriteTensor{Name: name, DType: dt, Shape: append([]int64(nil), shape...), Data: b}, nil
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, tensor.F32ToF16(f)) }

// absMax returns the element of largest magnitude (the first on ties) and
// that magnitude.
//
//go:norace
func absMax(x []float32) (maxv, amax float32) {
	for _, v := range x {
		if a := abs32(v); amax < a {
			amax, maxv = a, v
		}
	}
	return maxv, amax
}

//go:norace
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// truncClamp is C's (int)(v) followed by MIN(hi, ·): truncation toward
// zero, then an upper bound.
func truncClamp(v float32, hi int) int {
	return min(int(v), hi)
}

//go:norace
func quantBlockQ8_0(x []float32, y []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	id := inverse(d)
	putF16(y, d)
	for j, v := range x {
		y[2+j] = byte(int8(math.Round(float64(v * id)))) // roundf: half away from zero
	}
}

//go:norace
func quantBlockQ4_0(x []float32, y []byte) {
	maxv, _ := absMax(x)
	d := maxv / -8
	id := inverse(d)
	putF16(y, d)
	for j := range qk / 2 {
		x0 := truncClamp(float32(x[j]*id)+8.5, 15)
		x1 := truncClamp(float32(x[j+qk/2]*id)+8.5, 15)
		y[2+j] = byte(x0) | byte(x1)<<4
	}
}

//go:norace
func quantBlockQ4_1(x []float32, y []byte) {
	lo, hi := minMax(x)
	d := (hi - lo) / 15
	id := inverse(d)
	putF16(y, d)
	putF16(y[2:], lo)
	for j := range qk / 2 {
		x0 := truncClamp(float32((x[j]-lo)*id)+0.5, 15)
		x1 := truncClamp(float32((x[j+qk/2]-lo)*id)+0.5, 15)
		y[4+j] = byte(x0) | byte(x1)<<4
	}
}

//go:norace
func quantBlockQ5_0(x []float32, y []byte) {
	maxv, _ := absMax(x)
	d := maxv / -16
	id := inverse(d)
	putF16(y, d)
	var qh uint32
	for j := range qk / 2 {
		x0 := truncClamp(float32(x[j]*id)+16.5, 31)
		x1 := truncClamp(float32(x[j+qk/2]*id)+16.5, 31)
		y[6+j] = byte(x0&0x0f) | byte(x1&0x0f)<<4
		qh |= uint32(x0>>4&1)<<j | uint32(x1>>4&1)<<(j+qk/2)
	}
	binary.LittleEndian.PutUint32(y[2:], qh)
}

//go:norace
func quantBlockQ5_1(x []float32, y []byte) {
	lo, hi := minMax(x)
	d := (hi - lo) / 31
	id := inverse(d)
	putF16(y, d)
	putF16(y[2:], lo)
	var qh uint32
	for j := range qk / 2 {
		x0 := truncClamp(float32((x[j]-lo)*id)+0.5, 31)
		x1 := truncClamp(float32((x[j+qk/2]-lo)*id)+0.5, 31)
		y[8+j] = byte(x0&0x0f) | byte(x1&0x0f)<<4
		qh |= uint32(x0>>4&1)<<j | uint32(x1>>4&1)<<(j+qk/2)
	}
	binary.LittleEndian.PutUint32(y[4:], qh)
}
