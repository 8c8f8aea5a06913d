//go:build cgo

package mlx

import (
	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// HeadSlice reshapes x to [rows, heads, width], slices features [from,
// to) of the last axis and reshapes back.
func (s *step) HeadSlice(x backend.Array, heads, from, to int) backend.Array {
	in := use(nd(x), tensor.F32)
	w, err := backend.HeadSliceShape(in, heads, from, to)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	return s.record(in.rows, heads*(to-from), in.dt, func(a *Arena) *Array {
		h := a.Reshape(in.x, in.rows, heads, w)
		return a.Reshape(a.Slice(h, []int{0, 0, from}, []int{in.rows, heads, to}), in.rows, heads*(to-from))
	})
}

// HeadConcat concatenates a and b along the last axis of [rows, heads,
// width].
func (s *step) HeadConcat(x, y backend.Array, heads int) backend.Array {
	p, q := operands(x, y)
	wa, wb, err := backend.HeadConcatShape(p, q, heads)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	return s.record(p.rows, heads*(wa+wb), promote(p.dt, q.dt), func(a *Arena) *Array {
		j := a.Concatenate([]*Array{a.Reshape(p.x, p.rows, heads, wa), a.Reshape(q.x, q.rows, heads, wb)}, 2)
		return a.Reshape(j, p.rows, heads*(wa+wb))
	})
}

// HeadLinear multiplies each head's columns by its matrix as Linear does
// and joins the results along the columns.
func (s *step) HeadLinear(x backend.Array, ws []backend.Weight) backend.Array {
	m := wt(ws[0])
	in := use(nd(x), m.dt)
	o, cols, err := backend.HeadLinearShape(in, ws)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	heads := make([]*weight, len(ws))
	for h, w := range ws {
		heads[h] = wt(w)
	}
	dt := linearType(s.b.f32, in.dt, m) // a layer's heads share one type
	return s.record(in.rows, len(ws)*o, dt, func(a *Arena) *Array {
		parts := make([]*Array, len(heads))
		for h, w := range heads {
			parts[h] = linear(a, a.Slice(in.x, []int{0, h * cols}, []int{in.rows, (h + 1) * cols}), w, s.b.f32)
		}
		return a.Concatenate(parts, 1)
	})
}
