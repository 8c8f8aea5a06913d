package kernels

import (
	"fmt"

	"fusion/engine/tensor"
)

// MLXFloat is a matrix in one of MLX's floating-point quantization modes
// (mxfp4, mxfp8, nvfp4; see tensor.FPFormat): codes packed in uint32
// words along each row, [rows, cols·bits/32], and one uint8 scale per
// group, [rows, cols/group]; w[o][i] = code·scale.
//
// The product dequantizes each weight row into scratch (exactly: every
// code·scale is a float32) and takes its dot product with every
// activation row: correct first, not fast.
type MLXFloat struct {
	f              tensor.FPFormat
	rows, cols     int
	w, scales      []byte
	rowBytes, ngrp int
	// The value of every code byte and scale byte.
	codes  [256]float32
	scalev [256]float32
}

// NewMLXFloat wraps weights of a floating-point mode in place: packed is
// the raw bytes of the uint32 weight tensor, scales one byte per group.
func NewMLXFloat(mode string, rows, cols int, packed, scales []byte) (*MLXFloat, error) {
	f, ok := tensor.FP(mode)
	if !ok {
		return nil, fmt.Errorf("kernels: MLX mode %q is not a floating-point mode", mode)
	}
	n, err := checkShape(rows, cols)
	if err != nil {
		return nil, err
	}
	if cols%f.Group != 0 {
		return nil, fmt.Errorf("kernels: %d columns is not a multiple of the %s group size %d", cols, mode, f.Group)
	}
	if err := checkLen("MLX packed weights", len(packed), n/8*f.Bits); err != nil {
		return nil, err
	}
	if err := checkLen("MLX scales", len(scales), n/f.Group); err != nil {
		return nil, err
	}
	m := &MLXFloat{f: f, rows: rows, cols: cols, w: packed, scales: scales, rowBytes: cols / 8 * f.Bits, ngrp: cols / f.Group}
	for c := range 256 {
		m.codes[c], m.scalev[c] = f.Code(uint8(c)), f.Scale(uint8(c))
	}
	return m, nil
}

// Rows is the number of output features.
func (m *MLXFloat) Rows() int { return m.rows }

// Cols is the number of input features.
func (m *MLXFloat) Cols() int { return m.cols }

// Bytes is the size of codes and scales.
func (m *MLXFloat) Bytes() int { return len(m.w) + len(m.scales) }

func (m *MLXFloat) prepare(_ *impl, x []float32, batch int, a *actBuf) {
	a.x, a.batch, a.cols = x, batch, m.cols
}

func (m *MLXFloat) prepareRows(*impl, *actBuf, int, int) {}

func (m *MLXFloat) mulRows(k *impl, a *actBuf, dst []float32, r0, r1 int, sc *scratch) {
	w := sc.floats(m.cols)
	for o := r0; o < r1; o++ {
		m.dequantRow(w, o)
		for b := range a.batch {
			dst[b*m.rows+o] = k.dotF32(a.x[b*m.cols:(b+1)*m.cols], w)
		}
	}
}

// dequantRow reads the immutable weights and writes the calling worker's
// own scratch row, so the race detector has nothing to find here; it is
// left uninstrumented because, instrumented, this loop over every weight
// of every step (a real vocabulary's head: 19M a token) is what made the
// mxfp/nvfp parity tests minutes long under -race (make test).
//
//go:norace
func (m *MLXFloat) dequantRow(dst []float32, r int) {
	row := m.w[r*m.rowBytes : (r+1)*m.rowBytes]
	s := m.scales[r*m.ngrp : (r+1)*m.ngrp]
	g := m.f.Group
	if m.f.Bits == 8 {
		for i, c := range row {
			dst[i] = m.codes[c] * m.scalev[s[i/g]]
		}
		return
	}
	for j, c := range row {
		sv := m.scalev[s[2*j/g]]
		dst[2*j] = m.codes[c&15] * sv
		dst[2*j+1] = m.codes[c>>4] * sv
	}
}
