// Package layersplit divides a model's layers into the contiguous layer
// ranges of pipeline stages by compute cost per token: each stage costs
// its layers, and the last stage also its output head, counted as the
// layers it equals in weights read per token (on the Qwen3-0.6B shape the
// head weighs as much as ten layers). The split makes the costliest stage
// as cheap as it can be, so the stages of a pipeline stay evenly busy,
// while each stage's memory stays within what its node can hold. Memory
// is counted apart from compute when the model's per-layer costs are
// known (Costs, from its tensor table): a mixture's layer holds all its
// experts but a token reads a few, so the head that weighs ten layers of
// compute may weigh half a layer of memory. The cluster's planner and
// `fusion bench pipeline` both split with it.
package layersplit

import "math"

// Model is what a split needs to know of a model.
type Model struct {
	Layers int // decoder layers
	// Head is the output head's cost per token in layers (vocab × hidden
	// over one layer's weights: ModelCost); 0 counts only the layers.
	Head float64
	// Need is the bytes the whole model needs (weights and KV); 0: unknown,
	// no stage is bounded unless Costs says each layer's bytes.
	Need int64
	// MaxCut, if positive, is the last layer a stage after the first may
	// start at (Gemma 4's KV-shared layers stay in the stage of the layers
	// whose KV they read); 0: any.
	MaxCut int
	// Costs, when its slices are Layers long, are the model's costs layer
	// by layer, from its files: they replace Need's even share (Bytes) and
	// the cost of 1 per layer (Compute).
	Costs Costs
}

// Costs are a model's per-layer costs (a node reads them from the
// model's tensor table: runner.StageCosts). Memory and compute differ
// for a mixture of experts: a layer holds all its experts, a token reads
// the few it is routed to; DeepSeek's and GLM's first dense layers hold
// less than their sparse ones and read more.
type Costs struct {
	// Bytes is, per layer, what a stage holding it needs (its weights and
	// one sequence's KV or recurrent state in it); First what the first
	// stage needs beyond its layers (the embeddings), Last what the last
	// one needs beyond its layers (the final norm and the head).
	Bytes []int64 `json:"bytes,omitempty"`
	First int64   `json:"first,omitempty"`
	Last  int64   `json:"last,omitempty"`
	// Compute is, per layer, its cost per token in the units of Head (the
	// mean layer: 1).
	Compute []float64 `json:"compute,omitempty"`
}

// StageBytes is what the stage of layers [from, to) holds: with
// Costs.Bytes, its layers' bytes, plus First on the first stage and Last
// on the last; else the share of Need by compute, Need × (n + head) /
// (Layers + Head), the head counted on the last stage. 0 when unknown.
func (m Model) StageBytes(from, to int) int64 {
	if m.Layers <= 0 || from < 0 || to > m.Layers || from >= to {
		return 0
	}
	if len(m.Costs.Bytes) == m.Layers {
		var n int64
		for _, b := range m.Costs.Bytes[from:to] {
			n += b
		}
		if from == 0 {
			n += m.Costs.First
		}
		if to == m.Layers {
			n += m.Costs.Last
		}
		return n
	}
	if m.Need <= 0 {
		return 0
	}
	c := float64(to - from)
	if to == m.Layers {
		c += m.Head
	}
	return int64(math.Ceil(float64(m.Need) * c / (float64(m.Layers) + max(m.Head, 0))))
}

// StageCost is the compute cost per token of the stage of layers [from,
// to), in layers: Costs.Compute's (else 1 a layer), plus Head on the last
// stage.
func (m Model) StageCost(from, to int) float64 {
	c := float64(to - from)
	if len(m.Costs.Compute) == m.Layers {
		c = 0
		for _, x := range m.Costs.Compute[from:to] {
			c += x
		}
	}
	if to == m.Layers {
		c += max(m.Head, 0)
	}
	return c
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
	// Prefix sums of the per-layer costs: a stage's bytes and compute
	// in O(1), as StageBytes and StageCost give them.
	bytes, compute := len(m.Costs.Bytes) == L, len(m.Costs.Compute) == L
	sumB, sumC := make([]int64, L+1), make([]float64, L+1)
	for l := range L {
		sumB[l+1], sumC[l+1] = sumB[l], sumC[l]+1
		if bytes {
			sumB[l+1] += m.Costs.Bytes[l]
		}
		if compute {
			sumC[l+1] = sumC[l] + m.Costs.Compute[l]
		}
	}
	stageBytes := func(a, b int) int64 {
		if !bytes {
			return m.StageBytes(a, b)
		}
		n := sumB[b] - sumB[a]
		if a == 0 {
			n += m.Costs.First
		}
		if b == L {
			n += m.Costs.Last
		}
		return n
	}
	stageCost := func(a, b int) float64 {
		c := sumC[b] - sumC[a]
		if b == L {
			c += max(m.Head, 0)
		}
		return c
	}
	fits := func(i, a, b int) bool {
		return caps == nil || stageBytes(a, b) <= caps[i]
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
				if !fits(i, a, b) {
					continue
				}
				c := stageCost(a, b)
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
