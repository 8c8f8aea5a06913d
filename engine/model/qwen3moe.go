package model

import (
	"fmt"
	"math"
	"slices"

	"fusion/engine/backend"
)

// Qwen3-MoE: Qwen3's attention, and in its sparse layers (see
// modelfile.MoE.Sparse) a mixture of SwiGLU experts instead of the MLP.
// A router scores every expert; each token goes through the top k, and
// their outputs are summed weighted by the router's probabilities
// (renormalized over the k with norm_topk_prob):
//
//	p = softmax(gate(x)),  E = top_k(p),  out = Σ_{e∈E} p_e·down_e(silu(gate_e(x))·up_e(x))
//
// The experts are stacked as mlx-lm's SwitchGLU stores them
// (mlp.switch_mlp.{gate,up,down}_proj [experts, out, in]).
func loadQwen3MoE(w *loader, prefix string) block {
	if !w.cfg.MoE.Sparse(w.layer) {
		return loadQwen3(w, prefix)
	}
	return newQwen3Block(w, prefix, loadExperts(w, prefix+"mlp."))
}

// experts is a softmax-routed mixture of SwiGLU experts.
type experts struct {
	router         backend.Weight // [experts, hidden]
	gate, up, down []backend.Weight
	topK           int
	normTopK       bool
}

func loadExperts(w *loader, prefix string) *experts {
	c := w.cfg
	n, hidden, inter := c.MoE.Experts, c.HiddenSize, c.MoE.Intermediate
	return &experts{
		router:   w.matrix(prefix+"gate", n, hidden),
		gate:     w.experts(prefix+"switch_mlp.gate_proj", n, inter, hidden),
		up:       w.experts(prefix+"switch_mlp.up_proj", n, inter, hidden),
		down:     w.experts(prefix+"switch_mlp.down_proj", n, hidden, inter),
		topK:     c.MoE.TopK,
		normTopK: c.MoE.NormTopK,
	}
}

func (m *experts) forward(f *frame, x backend.Array) backend.Array {
	return runExperts(f, x, m.router, m.gate, m.up, m.down, m.topK, m.route, f.SwiGLU)
}

// runExperts is a mixture's forward pass: the router's logits [tokens,
// experts] are read back (one Read: on MLX a flush of the step's graph),
// route picks each token's k (row, expert, weight) entries, every entry
// goes through its expert's gate and up, act, and down, and MixRows sums
// each token's k outputs with their weights.
func runExperts(f *frame, x backend.Array, router backend.Weight, gate, up, down []backend.Weight, k int,
	route func(logits []float32, tokens int) (rows, which []int, weights []float32),
	act func(gate, up backend.Array) backend.Array,
) backend.Array {
	return mixExperts(f, x, f.Linear(x, router), gate, up, down, k, route, act)
}

// mixExperts is runExperts with the router's scores [tokens, experts]
// computed by the caller (Gemma 4 routes on another input than the
// experts').
func mixExperts(f *frame, x, scores backend.Array, gate, up, down []backend.Weight, k int,
	route func(logits []float32, tokens int) (rows, which []int, weights []float32),
	act func(gate, up backend.Array) backend.Array,
) backend.Array {
	logits, err := f.Read(scores)
	if err != nil {
		f.err = fmt.Errorf("layer %d router: %w", f.layer, err)
		logits = make([]float32, x.Rows()*len(gate)) // any routing; the step fails
	}
	rows, which, weights := route(logits, x.Rows())
	h := act(f.ExpertLinear(x, gate, rows, which), f.ExpertLinear(x, up, rows, which))
	pairs := make([]int, len(rows))
	for i := range pairs {
		pairs[i] = i
	}
	return f.MixRows(f.ExpertLinear(h, down, pairs, which), k, weights)
}

// route picks each token's top k experts from the router's logits
// [tokens, experts]: for token t, entries t·k … t·k+k−1 of rows (t),
// which (the experts, most probable first) and weights (their
// probabilities, renormalized if normTopK). Softmax is computed in
// float32 like mlx's precise softmax.
func (m *experts) route(logits []float32, tokens int) (rows, which []int, weights []float32) {
	n, k := len(m.gate), m.topK
	rows, which, weights = make([]int, 0, tokens*k), make([]int, 0, tokens*k), make([]float32, 0, tokens*k)
	p := make([]float32, n)
	order := make([]int, n)
	for t := range tokens {
		l := logits[t*n : (t+1)*n]
		mx := float32(math.Inf(-1))
		for _, v := range l {
			mx = max(mx, v)
		}
		var sum float32
		for e, v := range l {
			p[e] = float32(math.Exp(float64(v - mx)))
			sum += p[e]
		}
		for e := range p {
			p[e] /= sum
			order[e] = e
		}
		sortDescending(order, p)
		var top float32
		for _, e := range order[:k] {
			top += p[e]
		}
		for _, e := range order[:k] {
			s := p[e]
			if m.normTopK {
				s /= top
			}
			rows, which, weights = append(rows, t), append(which, e), append(weights, s)
		}
	}
	return rows, which, weights
}

// sortDescending orders the indices idx by vals[idx] from largest to
// smallest, equal values keeping idx's order (the lower expert first).
func sortDescending(idx []int, vals []float32) {
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case vals[a] > vals[b]:
			return -1
		case vals[a] < vals[b]:
			return 1
		}
		return 0
	})
}
