package kernels

import "fmt"

// PanelRows is the number of weight rows in one panel of a packed matrix.
const PanelRows = 16

// Packed is an f32 weight matrix laid out for outer-product products:
// panels of PanelRows weight rows (the last one zero-padded), each stored
// column by column, so that element (o, c) is at
// (o/16)·16·cols + 16·c + o%16. A product then broadcasts one activation
// value and multiplies it into 16 consecutive outputs with one FMA, and
// each output is one accumulator summed in column order, starting from 0:
// the same bits whatever the tile, the batch or the rows sharing it, so
// products stay row-independent (and a batch-1 product is no special
// case). Unlike Dense it is a copy, made once at load (PackF32).
type Packed struct {
	rows, cols int
	p          []float32
}

// PackedLen is the number of floats a packed [rows, cols] matrix takes.
func PackedLen(rows, cols int) int {
	return (rows + PanelRows - 1) / PanelRows * PanelRows * cols
}

// PackF32 copies w, widened to f32, into a Packed matrix.
func PackF32(w Weights) *Packed {
	rows, cols := w.Rows(), w.Cols()
	p := &Packed{rows: rows, cols: cols, p: make([]float32, PackedLen(rows, cols))}
	row := make([]float32, cols)
	for o := range rows {
		w.dequantRow(row, o)
		panel := p.p[o/PanelRows*PanelRows*cols:]
		for c, v := range row {
			panel[c*PanelRows+o%PanelRows] = v
		}
	}
	return p
}

// PackRows packs the [rows, cols] matrix whose row o is
// src[o·ld : o·ld+cols] into dst[:PackedLen(rows, cols)].
func PackRows(dst, src []float32, ld, rows, cols int) {
	checkPack(dst, src, ld, rows, cols, rows, cols)
	for o0 := 0; o0 < rows; o0 += PanelRows {
		panel := dst[o0*cols : (o0+PanelRows)*cols]
		n := min(PanelRows, rows-o0)
		for i := range n {
			r := src[(o0+i)*ld : (o0+i)*ld+cols]
			for c, v := range r {
				panel[c*PanelRows+i] = v
			}
		}
		if n < PanelRows {
			for c := range cols {
				clear(panel[c*PanelRows+n : (c+1)*PanelRows])
			}
		}
	}
}

// PackCols packs the [rows, cols] matrix whose row o is column o of src:
// element (o, c) is src[c·ld+o] (a transposed matrix: packing it is a
// copy of 16-float runs).
func PackCols(dst, src []float32, ld, rows, cols int) {
	checkPack(dst, src, ld, rows, cols, cols, rows)
	for o0 := 0; o0 < rows; o0 += PanelRows {
		panel := dst[o0*cols : (o0+PanelRows)*cols]
		n := min(PanelRows, rows-o0)
		for c := range cols {
			d := panel[c*PanelRows : (c+1)*PanelRows]
			copy(d, src[c*ld+o0:c*ld+o0+n])
			clear(d[n:])
		}
	}
}

// checkPack checks that src holds srcRows rows of srcCols at stride ld
// and dst a packed [rows, cols] matrix.
func checkPack(dst, src []float32, ld, rows, cols, srcRows, srcCols int) {
	if rows < 1 || cols < 1 || ld < srcCols || len(src) < (srcRows-1)*ld+srcCols {
		panic(fmt.Sprintf("kernels: pack: %d values with stride %d for [%d, %d]", len(src), ld, srcRows, srcCols))
	}
	if len(dst) < PackedLen(rows, cols) {
		panic(fmt.Sprintf("kernels: pack: %d values for a packed [%d, %d]", len(dst), rows, cols))
	}
}

// MulPacked computes dst[b·ldd+o] = Σ_c x[b·ldx+c]·W[o][c] for b < m and
// o < rows, where W is the [rows, cols] matrix packed in p (by PackRows,
// PackCols or PackF32), on the calling goroutine. Each output is summed
// in column order from 0, so it does not depend on m or on the other
// rows. It panics if a slice is too short.
func (k *Kernels) MulPacked(dst []float32, ldd int, x []float32, ldx, m int, p []float32, rows, cols int) {
	if m < 1 || rows < 1 || cols < 1 || ldx < cols || ldd < rows {
		panic(fmt.Sprintf("kernels: MulPacked: m %d, [%d, %d], ldx %d, ldd %d", m, rows, cols, ldx, ldd))
	}
	if len(x) < (m-1)*ldx+cols || len(dst) < (m-1)*ldd+rows || len(p) < PackedLen(rows, cols) {
		panic(fmt.Sprintf("kernels: MulPacked: x %d, dst %d, packed %d values for m %d, [%d, %d]", len(x), len(dst), len(p), m, rows, cols))
	}
	k.impl.gemm(dst, ldd, x, ldx, m, p, cols, 0, rows)
}

// gemmGeneric is impl.gemm in Go: outputs [r0, r1) (r0 a multiple of 16)
// of m activation rows, every length already checked.
func gemmGeneric(dst []float32, ldd int, x []float32, ldx, m int, p []float32, cols, r0, r1 int) {
	var acc [PanelRows]float32
	for o0 := r0; o0 < r1; o0 += PanelRows {
		panel := p[o0*cols : (o0+PanelRows)*cols]
		n := min(PanelRows, r1-o0)
		for b := range m {
			acc = [PanelRows]float32{}
			xr := x[b*ldx : b*ldx+cols]
			for c, v := range xr {
				w := panel[c*PanelRows : (c+1)*PanelRows]
				for i := range acc {
					acc[i] += v * w[i]
				}
			}
			copy(dst[b*ldd+o0:b*ldd+o0+n], acc[:n])
		}
	}
}

// Rows is the number of output features.
func (p *Packed) Rows() int { return p.rows }

// Cols is the number of input features.
func (p *Packed) Cols() int { return p.cols }

// Bytes is the size of the packed data (padding included).
func (p *Packed) Bytes() int { return 4 * len(p.p) }

func (p *Packed) prepare(_ *impl, x []float32, batch int, a *actBuf) {
	a.x, a.batch, a.cols = x, batch, p.cols
}

func (p *Packed) prepareRows(*impl, *actBuf, int, int) {}

// rowAlign makes Pool.MatMul hand out whole panel groups.
func (p *Packed) rowAlign() int { return 4 * PanelRows }

func (p *Packed) mulRows(k *impl, a *actBuf, dst []float32, r0, r1 int, _ *scratch) {
	if r0%PanelRows != 0 {
		panic(fmt.Sprintf("kernels: packed rows from %d, not a panel boundary", r0))
	}
	k.gemm(dst, p.rows, a.x, p.cols, a.batch, p.p, p.cols, r0, r1)
}

func (p *Packed) dequantRow(dst []float32, r int) {
	panel := p.p[r/PanelRows*PanelRows*p.cols:]
	for c := range dst {
		dst[c] = panel[c*PanelRows+r%PanelRows]
	}
}

// PackedFast reports whether k multiplies packed matrices with SIMD
// kernels; at the other levels they run in Go, slower than Dense, so
// callers should pack only when it is true.
func (k *Kernels) PackedFast() bool { return k.impl.level == LevelAVX512 }
