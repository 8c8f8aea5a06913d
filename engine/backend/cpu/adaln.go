package cpu

import (
	"fmt"
	"math"

	"fusion/engine/backend"
)

// ConcatRows stacks arrays of one width.
func (s *step) ConcatRows(parts ...backend.Array) backend.Array {
	if len(parts) == 0 {
		panic("cpu: ConcatRows: no arrays")
	}
	cols, rows := arr(parts[0]).cols, 0
	for _, p := range parts {
		a := arr(p)
		if a.cols != cols {
			panic(fmt.Sprintf("cpu: ConcatRows: widths %d and %d", cols, a.cols))
		}
		rows += a.rows
	}
	out := s.new(rows, cols)
	off := 0
	for _, p := range parts {
		off += copy(out.data[off:], arr(p).data)
	}
	return out
}

// SiLU returns x·sigmoid(x).
func (s *step) SiLU(x backend.Array) backend.Array {
	a := arr(x)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		src, dst := a.data[lo*a.cols:hi*a.cols], out.data[lo*a.cols:hi*a.cols]
		for i, v := range src {
			dst[i] = float32(float64(v) / (1 + math.Exp(-float64(v))))
		}
	})
	return out
}

// broadcastRow checks that r is one row as wide as x.
func broadcastRow(op string, x, r *array) {
	if r.rows != 1 || r.cols != x.cols {
		panic(fmt.Sprintf("cpu: %s: row [%d, %d] for [%d, %d]", op, r.rows, r.cols, x.rows, x.cols))
	}
}

// Modulate returns LayerNorm(x)·(1 + scale) + shift.
func (s *step) Modulate(x, shift, scale backend.Array, eps float32) backend.Array {
	a, sh, sc := arr(x), arr(shift), arr(scale)
	broadcastRow("Modulate", a, sh)
	broadcastRow("Modulate", a, sc)
	w := make([]float32, a.cols)
	for i, v := range sc.data {
		w[i] = 1 + v
	}
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			layerNorm(out.row(r), a.row(r), w, sh.data, eps)
		}
	})
	return out
}

// Gate returns res + g·x.
func (s *step) Gate(res, x, g backend.Array) backend.Array {
	r, a, gr := arr(res), arr(x), arr(g)
	sameShape("Gate", r, a)
	broadcastRow("Gate", a, gr)
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			dst, base, src := out.row(row), r.row(row), a.row(row)
			for i, v := range src {
				dst[i] = base[i] + gr.data[i]*v
			}
		}
	})
	return out
}

// RoPETable rotates adjacent pairs of every head by per-row tables.
func (s *step) RoPETable(x, cos, sin backend.Array) backend.Array {
	a, c, sn := arr(x), arr(cos), arr(sin)
	sameShape("RoPETable", c, sn)
	d := c.cols
	if c.rows != a.rows || d == 0 || d%2 != 0 || a.cols%d != 0 {
		panic(fmt.Sprintf("cpu: RoPETable: x [%d, %d], tables [%d, %d]", a.rows, a.cols, c.rows, d))
	}
	out := s.new(a.rows, a.cols)
	s.b.parallelRows(a.rows, elementwiseRows(a.cols), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			dst, src, cr, sr := out.row(row), a.row(row), c.row(row), sn.row(row)
			for h := 0; h < len(src); h += d {
				for i := 0; i < d; i += 2 {
					x0, x1 := src[h+i], src[h+i+1]
					dst[h+i] = x0*cr[i] + -x1*sr[i]
					dst[h+i+1] = x1*cr[i+1] + x0*sr[i+1]
				}
			}
		}
	})
	return out
}
