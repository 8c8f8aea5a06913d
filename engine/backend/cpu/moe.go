package cpu

import "fusion/engine/backend"

// ExpertLinear groups the rows by expert: each expert used multiplies its
// rows, gathered into one block, in one product (as Linear does), and the
// results are scattered back in the given order. A row's values do not
// depend on which other rows share its product, so a token gets the same
// bits alone and in a batch.
func (s *step) ExpertLinear(x backend.Array, experts []backend.Weight, rows, which []int) backend.Array {
	a := arr(x)
	o, in, err := backend.ExpertShape(a, experts, rows, which)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	out := s.new(len(rows), o)
	used, members := backend.GroupByExpert(which, len(experts))
	for i, e := range used {
		m := wt(experts[e])
		idx := members[i]
		gathered := s.new(len(idx), in)
		for j, p := range idx {
			copy(gathered.row(j), a.row(rows[p]))
		}
		y := arr(s.Linear(gathered, m))
		for j, p := range idx {
			copy(out.row(p), y.row(j))
		}
	}
	return out
}

// MixRows sums each group of k rows, weighted, in row order.
func (s *step) MixRows(x backend.Array, k int, weights []float32) backend.Array {
	a := arr(x)
	if err := backend.MixShape(a, k, weights); err != nil {
		panic("cpu: " + err.Error())
	}
	out := s.new(a.rows/k, a.cols)
	for t := range out.rows {
		dst := out.row(t)
		clear(dst) // the arena reuses memory
		for j := range k {
			w, src := weights[t*k+j], a.row(t*k+j)
			for c, v := range src {
				dst[c] += w * v
			}
		}
	}
	return out
}
