package kernels

import (
	"fmt"
	"math"
)

// Weights is a row-major [Rows, Cols] weight matrix in one of the formats
// this package multiplies: *Dense, *MLXAffine or *GGUF. Values are built
// by the New* constructors, which check the shape against the data.
type Weights interface {
	Rows() int
	Cols() int
	// Bytes is the size of the weight data a product streams (codes,
	// scales and biases).
	Bytes() int

	// prepare points a at batch rows of x and sizes its buffers;
	// prepareRows then fills activation rows [b0, b1) of them (rows are
	// independent, so a Pool fills a large batch in parallel).
	prepare(k *impl, x []float32, batch int, a *actBuf)
	prepareRows(k *impl, a *actBuf, b0, b1 int)
	mulRows(k *impl, a *actBuf, dst []float32, r0, r1 int, s *scratch)
	dequantRow(dst []float32, r int)
}

// actBuf is the per-call form of the activations a kernel reads; its
// slices are reused from call to call.
type actBuf struct {
	x     []float32 // batch rows of cols
	batch int
	cols  int

	xp   []float32 // MLX 4-bit: x permuted for the AVX-512 kernel
	xsum []float32 // MLX: Σ x per group, batch·cols/group
	q8   q8Row     // GGUF: x quantized, batch·cols
}

// scratch is per-worker memory for row kernels.
type scratch struct {
	f []float32
}

func (s *scratch) floats(n int) []float32 {
	if cap(s.f) < n {
		s.f = make([]float32, n)
	}
	return s.f[:n]
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// checkShape validates rows and cols and returns rows·cols.
func checkShape(rows, cols int) (int, error) {
	if rows <= 0 || cols <= 0 {
		return 0, fmt.Errorf("kernels: invalid shape [%d, %d]", rows, cols)
	}
	if rows > math.MaxInt32 || cols > math.MaxInt32 || rows > math.MaxInt/cols/8 {
		return 0, fmt.Errorf("kernels: shape [%d, %d] too large", rows, cols)
	}
	return rows * cols, nil
}

func checkLen(what string, got, want int) error {
	if got != want {
		return fmt.Errorf("kernels: %s has %d bytes, want %d", what, got, want)
	}
	return nil
}

// DequantizeRow writes row r of w, widened to f32, into dst[:w.Cols()]:
// for MLX affine weights exactly scale·q + bias (rounded to f32 after the
// product and after the sum, no fused multiply-add), for GGUF formats by
// ggml's dequantize_row_* formulas with the same rounding rule. It panics if r or dst is out of range.
func DequantizeRow(dst []float32, w Weights, r int) {
	if r < 0 || r >= w.Rows() {
		panic(fmt.Sprintf("kernels: row %d out of range [0, %d)", r, w.Rows()))
	}
	w.dequantRow(dst[:w.Cols()], r)
}
