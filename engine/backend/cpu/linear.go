package cpu

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
)

func wt(w backend.Weight) *weight {
	x, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("cpu: weight of another backend (%T)", w))
	}
	return x
}

// linearRows is the most rows one matrix product takes: the kernels loop
// over weight rows, then over activation rows, so the activation rows of
// one product should stay in L2 while the weights stream past them.
var linearRows = 128

// Linear computes x·Wᵀ + bias with all rows in one product, split over
// the pool's goroutines by output feature.
func (s *step) Linear(x backend.Array, w backend.Weight) backend.Array {
	a, m := arr(x), wt(w)
	if a.cols != m.In() {
		panic(fmt.Sprintf("cpu: Linear %s: input has %d features, weight takes %d", m.name, a.cols, m.In()))
	}
	out := s.new(a.rows, m.Out())
	in, o := m.In(), m.Out()
	for r := 0; r < a.rows; r += linearRows {
		n := min(linearRows, a.rows-r)
		s.b.pool.MatMul(out.data[r*o:(r+n)*o], a.data[r*in:(r+n)*in], n, m.w)
	}
	if m.bias != nil {
		for r := range a.rows {
			s.b.k.Add(out.row(r), out.row(r), m.bias)
		}
	}
	return out
}

// Embed gathers rows of the table, dequantized to float32.
func (s *step) Embed(table backend.Weight, ids []int32) backend.Array {
	m := wt(table)
	out := s.new(len(ids), m.In())
	for i, id := range ids {
		if id < 0 || int(id) >= m.Out() {
			panic(fmt.Sprintf("cpu: Embed %s: token %d outside [0, %d)", m.name, id, m.Out()))
		}
		kernels.DequantizeRow(out.row(i), m.w, int(id))
	}
	return out
}
