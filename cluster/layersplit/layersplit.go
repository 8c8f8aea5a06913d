// Package layersplit divides a model's layers into the contiguous layer
// ranges of pipeline stages by compute cost per token: each stage costs
// its layers, and the last stage also its output head, counted as the
// layers it equals in weights read per token (on the Qwen3-0.6B shape the
// head weighs as much as ten layers). The split makes the costliest stage
// as cheap as it can be, so the stages of a pipeline stay evenly busy,
// while each stage's share of the model's memory stays within what its
// node can hold. The cluster's planner and `fusion bench pipeline` both
// split with it.
package layersplit

import "math"

// Model is what a split needs to know of a model.
type Model struct {
	Layers int // decoder layers
	// Head is the output head's cost per token in layers (vocab × hidden
	// over one layer's weights: ModelCost); 0 counts only the layers.
	Head float64
	// Need is the bytes the whole model needs (weights and KV); 0: unknown,
	// no stage is bounded.
	Need int64
	// MaxCut, if positive, is the last layer a stage after the first may
	// start at (Gemma 4's KV-shared layers stay in the stage of the layers
	// whose KV they read); 0: any.
	MaxCut int
}

// StageBytes is the share of m.Need a stage of n layers holds, the head
// counted on the last stage: Need × (n + head) / (Layers + Head).
func (m Model) StageBytes(n int, last bool) int64 {
	if m.Need <= 0 || m.Layers <= 0 {
		return 0
	}
	c := float64(n)
	if last {
		c += m.Head
	}
	return int64(math.Ceil(float64(m.Need) * c / (float64(m.Layers) + max(m.Head, 0))))
}

// Split returns the bounds of k stages over m's layers — stage i runs
// layers [b[i], b[i+1]), b[0] = 0, b[k] = m.Layers, every stage at least
// one layer — that make the costliest stage the cheapest (ties: the most
// even costs, then the latest bounds: earlier stages take the extra
// layers, the last one has the head) with every stage's StageBytes
// within caps[i], the bytes its node can hold (caps nil: unbounded). ok is
// false when no split fits, caps is not nil and not k long, or there are
// more stages than layers or none.
func Split(m Model, k int, caps []int64) (bounds []int, ok bool) {
	L := m.Layers
	if k <= 0 || L < k || caps != nil && len(caps) != k {
		return nil, false
	}
	head := max(m.Head, 0)
	cost := func(i, n int) float64 {
		if i == k-1 {
			return float64(n) + head
		}
		return float64(n)
	}
	fits := func(i, n int) bool {
		return caps == nil || m.StageBytes(n, i == k-1) <= caps[i]
	}
	type state struct {
		worst, squares float64
		prev           int // the bound before this one
		ok             bool
	}
	// best[i][b]: stages 0..i−1 cover layers [0, b).
	best := make([][]state, k+1)
	for i := range best {
		best[i] = make([]state, L+1)
	}
	best[0][0] = state{ok: true}
	for i := range k {
		for a := i; a <= L-(k-i); a++ {
			from := best[i][a]
			if !from.ok {
				continue
			}
			lo, hi := a+1, L-(k-1-i)
			if i == k-1 {
				lo = L // the last stage takes the rest
			}
			if i < k-1 && m.MaxCut > 0 {
				hi = min(hi, m.MaxCut)
			}
			for b := lo; b <= hi; b++ {
				n := b - a
				if !fits(i, n) {
					continue
				}
				c := cost(i, n)
				s := state{worst: max(from.worst, c), squares: from.squares + c*c, prev: a, ok: true}
				cur := best[i+1][b]
				if !cur.ok || s.worst < cur.worst || s.worst == cur.worst && s.squares <= cur.squares {
					best[i+1][b] = s
				}
			}
		}
	}
	if !best[k][L].ok {
		return nil, false
	}
	bounds = make([]int, k+1)
	bounds[k] = L
	for i := k; i > 0; i-- {
		bounds[i-1] = best[i][bounds[i]].prev
	}
	return bounds, true
}
