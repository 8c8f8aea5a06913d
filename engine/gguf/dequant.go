package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"fusion/engine/tensor"
)

// RowFunc converts len(dst) elements, a whole number of blocks, from src,
// which holds exactly their bytes. It does no checking of its own: callers
// get one from RowDequantizer and check sizes once (DequantizeRow does).
type RowFunc func(src []byte, dst []float32)

// RowDequantizer returns the conversion kernel for dt, for matmul kernels
// that dequantize row by row. Every kernel reproduces ggml's reference
// dequantize_row_* bit for bit (products are rounded to float32 one by one,
// never fused).
func RowDequantizer(dt tensor.DType) (RowFunc, error) {
	switch dt {
	case tensor.F32:
		return dequantF32, nil
	case tensor.F16:
		return dequantF16, nil
	case tensor.BF16:
		return dequantBF16, nil
	case tensor.Q8_0:
		return dequantQ8_0, nil
	case tensor.Q4_0:
		return dequantQ4_0, nil
	case tensor.Q4_1:
		return dequantQ4_1, nil
	case tensor.Q5_0:
		return dequantQ5_0, nil
	case tensor.Q5_1:
		return dequantQ5_1, nil
	case tensor.Q2_K:
		return dequantQ2_K, nil
	case tensor.Q3_K:
		return dequantQ3_K, nil
	case tensor.Q4_K:
		return dequantQ4_K, nil
	case tensor.Q5_K:
		return dequantQ5_K, nil
	case tensor.Q6_K:
		return dequantQ6_K, nil
	case tensor.Q8_K:
		return dequantQ8_K, nil
	case tensor.MXFP4:
		return dequantMXFP4, nil
	}
	return nil, fmt.Errorf("gguf: cannot dequantize %v", dt)
}

// DequantizeRow converts len(dst) elements of type dt from src, checking
// that len(dst) is a whole number of blocks and src holds exactly their
// bytes.
func DequantizeRow(dt tensor.DType, src []byte, dst []float32) error {
	f, err := RowDequantizer(dt)
	if err != nil {
		return err
	}
	size, err := dt.ByteSize(int64(len(dst)))
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if int64(len(src)) != size {
		return fmt.Errorf("gguf: %d %v elements take %d bytes, got %d", len(dst), dt, size, len(src))
	}
	f(src, dst)
	return nil
}

// Dequantize converts all of t into dst, which must have t.Elements()
// elements.
func Dequantize(t tensor.Tensor, dst []float32) error {
	n, err := tensor.NumElements(t.Shape)
	if err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	if int64(len(dst)) != n {
		return fmt.Errorf("gguf: tensor %q has %d elements, destination %d", t.Name, n, len(dst))
	}
	if err := DequantizeRow(t.DType, t.Data, dst); err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	return nil
}

// ToFloat32 returns t converted to a new float32 slice.
func ToFloat32(t tensor.Tensor) ([]float32, error) {
	n, err := tensor.NumElements(t.Shape)
	if err != nil {
		return nil, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	dst := make([]float32, n)
	return dst, Dequantize(t, dst)
}

// Rows returns the number of rows of t (the product of all but the
// innermost dimension) and the bytes of one row.
func Rows(t tensor.Tensor) (rows int, rowBytes int, err error) {
	if len(t.Shape) == 0 {
		return 0, 0, fmt.Errorf("gguf: tensor %q is a scalar", t.Name)
	}
	cols := t.Shape[len(t.Shape)-1]
	nrows, err := tensor.NumElements(t.Shape[:len(t.Shape)-1])
	if err != nil {
		return 0, 0, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	rb, err := t.DType.ByteSize(cols)
	if err != nil {
		return 0, 0, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
	}
	if nrows*rb != int64(len(t.Data)) {
		return 0, 0, fmt.Errorf("gguf: tensor %q: %d bytes of data for %d rows of %d bytes", t.Name, len(t.Data), nrows, rb)
	}
	return int(nrows), int(rb), nil
}

// Row returns the bytes of row i of t.
func Row(t tensor.Tensor, i int) ([]byte, error) {
	rows, rb, err := Rows(t)
	if err != nil {
		return nil, err
	}
	if i < 0 || i >= rows {
		return nil, fmt.Errorf("gguf: tensor %q: row %d out of range [0, %d)", t.Name, i, rows)
	}
	return t.Data[i*rb : (i+1)*rb : (i+1)*rb], nil
}

func f16(b []byte) float32 { return tensor.F16ToF32(binary.LittleEndian.Uint16(b)) }

func dequantF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func dequantF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f16(src[2*i:])
	}
}

func dequantBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}
