//go:build cgo

package mlx

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// ConcatRows stacks arrays of one width (mlx concatenate on axis 0).
func (s *step) ConcatRows(parts ...backend.Array) backend.Array {
	if len(parts) == 0 {
		panic("mlx: ConcatRows: no arrays")
	}
	ns := make([]*node, len(parts))
	rows, dt := 0, tensor.DType(0)
	for i, p := range parts {
		ns[i] = use(nd(p), tensor.F32)
		if ns[i].cols != ns[0].cols {
			panic(fmt.Sprintf("mlx: ConcatRows: widths %d and %d", ns[0].cols, ns[i].cols))
		}
		rows += ns[i].rows
		if i == 0 {
			dt = ns[i].dt
		} else {
			dt = promote(dt, ns[i].dt)
		}
	}
	return s.record(rows, ns[0].cols, dt, func(a *Arena) *Array {
		xs := make([]*Array, len(ns))
		for i, n := range ns {
			xs[i] = as(a, n.x, dt)
		}
		return a.Concatenate(xs, 0)
	})
}

// SiLU returns x·sigmoid(x).
func (s *step) SiLU(x backend.Array) backend.Array {
	in := use(nd(x), tensor.F32)
	return s.record(in.rows, in.cols, in.dt, func(a *Arena) *Array { return a.Multiply(in.x, a.Sigmoid(in.x)) })
}

// broadcastRow checks that r is one row as wide as x.
func broadcastRow(op string, x, r *node) {
	if r.rows != 1 || r.cols != x.cols {
		panic(fmt.Sprintf("mlx: %s: row [%d, %d] for [%d, %d]", op, r.rows, r.cols, x.rows, x.cols))
	}
}

// Modulate returns LayerNorm(x)·(1 + scale) + shift: mlx fast.layer_norm
// with (1 + scale) as its weight and shift as its bias.
func (s *step) Modulate(x, shift, scale backend.Array, eps float32) backend.Array {
	in, sh, sc := use(nd(x), tensor.F32), use(nd(shift), tensor.F32), use(nd(scale), tensor.F32)
	broadcastRow("Modulate", in, sh)
	broadcastRow("Modulate", in, sc)
	dt := promote(promote(in.dt, sh.dt), sc.dt)
	return s.record(in.rows, in.cols, dt, func(a *Arena) *Array {
		one := as(a, a.FromFloat32([]float32{1}, 1), sc.dt)
		w := a.Reshape(a.Add(sc.x, one), in.cols)
		return a.LayerNorm(in.x, w, a.Reshape(sh.x, in.cols), eps)
	})
}

// Gate returns res + g·x.
func (s *step) Gate(res, x, g backend.Array) backend.Array {
	r, in, gr := use(nd(res), tensor.F32), use(nd(x), tensor.F32), use(nd(g), tensor.F32)
	sameShape("Gate", r, in)
	broadcastRow("Gate", in, gr)
	dt := promote(promote(r.dt, in.dt), gr.dt)
	return s.record(in.rows, in.cols, dt, func(a *Arena) *Array { return a.Add(r.x, a.Multiply(gr.x, in.x)) })
}

// RoPETable rotates adjacent pairs of every head by per-row tables: x as
// [rows, heads, d/2, 2], the rotated pairs (−x₁, x₀) concatenated on the
// last axis, then x·cos + r·sin with the tables broadcast over heads.
func (s *step) RoPETable(x, cos, sin backend.Array) backend.Array {
	in, c, sn := use(nd(x), tensor.F32), use(nd(cos), tensor.F32), use(nd(sin), tensor.F32)
	sameShape("RoPETable", c, sn)
	d := c.cols
	if c.rows != in.rows || d == 0 || d%2 != 0 || in.cols%d != 0 {
		panic(fmt.Sprintf("mlx: RoPETable: x [%d, %d], tables [%d, %d]", in.rows, in.cols, c.rows, d))
	}
	rows, heads := in.rows, in.cols/d
	dt := promote(promote(in.dt, c.dt), sn.dt)
	return s.record(rows, in.cols, dt, func(a *Arena) *Array {
		p := a.Reshape(in.x, rows, heads, d/2, 2)
		x0 := a.Slice(p, []int{0, 0, 0, 0}, []int{rows, heads, d / 2, 1})
		x1 := a.Slice(p, []int{0, 0, 0, 1}, []int{rows, heads, d / 2, 2})
		minus := as(a, a.FromFloat32([]float32{-1}, 1), in.dt)
		r := a.Reshape(a.Concatenate([]*Array{a.Multiply(x1, minus), x0}, 3), rows, heads, d)
		ct, st := a.Reshape(c.x, rows, 1, d), a.Reshape(sn.x, rows, 1, d)
		y := a.Add(a.Multiply(a.Reshape(in.x, rows, heads, d), ct), a.Multiply(r, st))
		return a.Reshape(y, rows, in.cols)
	})
}
