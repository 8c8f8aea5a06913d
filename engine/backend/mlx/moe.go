//go:build cgo

package mlx

import (
	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// ExpertLinear gathers the rows of each expert used into one block (one
// take), multiplies each block by its expert's matrix as Linear does, and
// puts the results back in the given order (one take of the joined
// blocks).
func (s *step) ExpertLinear(x backend.Array, experts []backend.Weight, rows, which []int) backend.Array {
	in := nd(x)
	o, cols, err := backend.ExpertShape(in, experts, rows, which)
	if err != nil {
		panic("mlx: " + err.Error())
	}
	used, members := backend.GroupByExpert(which, len(experts))
	src := make([]int32, 0, len(rows))  // row of x for each grouped position
	inv := make([]int32, len(rows))     // grouped position of each result row
	ws := make([]*weight, len(used))    // each group's expert
	bounds := make([]int, 0, len(used)) // each group's end in src
	for i, e := range used {
		ws[i] = wt(experts[e])
		for _, p := range members[i] {
			inv[p] = int32(len(src))
			src = append(src, int32(rows[p]))
		}
		bounds = append(bounds, len(src))
	}
	in = use(in, ws[0].dt)
	dt := linearType(s.b.f32, in.dt, ws[0]) // the experts of a layer share one type
	return s.record(len(rows), o, dt, func(a *Arena) *Array {
		xs := a.Take(in.x, a.FromInt32(src, len(src)), 0)
		parts := make([]*Array, len(ws))
		start := 0
		for i, m := range ws {
			parts[i] = linear(a, a.Slice(xs, []int{start, 0}, []int{bounds[i], cols}), m, s.b.f32)
			start = bounds[i]
		}
		return a.Take(a.Concatenate(parts, 0), a.FromInt32(inv, len(inv)), 0)
	})
}

// MixRows adds up the k rows of each group, each times its weight, in
// order: Σ_j take(x, rows t·k+j)·w_j.
func (s *step) MixRows(x backend.Array, k int, weights []float32) backend.Array {
	in := nd(x)
	if err := backend.MixShape(in, k, weights); err != nil {
		panic("mlx: " + err.Error())
	}
	n := in.rows / k
	idx := make([][]int32, k)
	ws := make([][]float32, k)
	for j := range k {
		idx[j], ws[j] = make([]int32, n), make([]float32, n)
		for t := range n {
			idx[j][t], ws[j][t] = int32(t*k+j), weights[t*k+j]
		}
	}
	dt := in.dt // the router's weights in the activations' type, as mlx-lm's scores are
	if s.b.f32 {
		dt = tensor.F32
	}
	return s.record(n, in.cols, dt, func(a *Arena) *Array {
		var sum *Array
		for j := range k {
			y := a.Multiply(a.Take(in.x, a.FromInt32(idx[j], n), 0), as(a, a.FromFloat32(ws[j], n, 1), dt))
			if sum == nil {
				sum = y
			} else {
				sum = a.Add(sum, y)
			}
		}
		return sum
	})
}
