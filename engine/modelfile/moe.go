package modelfile

import (
	"fmt"
	"slices"
)

// MoE is the mixture-of-experts part of a config (Qwen3-MoE's keys, with
// mlx-lm's meaning): layer l has a sparse block of Experts experts, each
// token routed to the TopK of them by the softmax of a router, unless l is
// in MLPOnlyLayers or (l+1) is not a multiple of SparseStep, in which case
// it has a dense MLP of intermediate_size.
type MoE struct {
	Experts int `json:"num_experts"`
	TopK    int `json:"num_experts_per_tok"`
	// Intermediate is moe_intermediate_size, the width of one expert.
	Intermediate  int   `json:"moe_intermediate_size"`
	SparseStep    int   `json:"decoder_sparse_step"`
	MLPOnlyLayers []int `json:"mlp_only_layers"`
	// NormTopK renormalizes the chosen experts' probabilities to sum to 1
	// (norm_topk_prob).
	NormTopK bool `json:"norm_topk_prob"`
}

// Sparse reports whether layer l has the mixture-of-experts block.
func (m *MoE) Sparse(l int) bool {
	return m != nil && m.Experts > 0 && !slices.Contains(m.MLPOnlyLayers, l) && (l+1)%m.SparseStep == 0
}

type rawMoE struct {
	NumExperts          *int64 `json:"num_experts"`
	NumExpertsPerTok    *int64 `json:"num_experts_per_tok"`
	MoEIntermediateSize *int64 `json:"moe_intermediate_size"`
	DecoderSparseStep   *int64 `json:"decoder_sparse_step"`
	MLPOnlyLayers       []int  `json:"mlp_only_layers"`
	NormTopKProb        *bool  `json:"norm_topk_prob"`
}

// parse checks the MoE keys; every one but mlp_only_layers and
// norm_topk_prob is required, as mlx-lm's ModelArgs has them.
func (r rawMoE) parse(layers int) (*MoE, error) {
	m := &MoE{MLPOnlyLayers: r.MLPOnlyLayers, NormTopK: orBool(r.NormTopKProb, false)}
	for _, f := range []struct {
		name     string
		v        *int64
		dst      *int
		min, max int64
	}{
		{"num_experts", r.NumExperts, &m.Experts, 0, maxExperts},
		{"num_experts_per_tok", r.NumExpertsPerTok, &m.TopK, 1, maxExperts},
		{"moe_intermediate_size", r.MoEIntermediateSize, &m.Intermediate, 1, maxIntermediate},
		{"decoder_sparse_step", r.DecoderSparseStep, &m.SparseStep, 1, maxLayers},
	} {
		if f.v == nil {
			return nil, fmt.Errorf("%w: missing %s", ErrInvalidConfig, f.name)
		}
		if *f.v < f.min || *f.v > f.max {
			return nil, fmt.Errorf("%w: %s %d out of range [%d, %d]", ErrInvalidConfig, f.name, *f.v, f.min, f.max)
		}
		*f.dst = int(*f.v)
	}
	if m.Experts > 0 && m.TopK > m.Experts {
		return nil, fmt.Errorf("%w: num_experts_per_tok %d exceeds num_experts %d", ErrInvalidConfig, m.TopK, m.Experts)
	}
	for _, l := range m.MLPOnlyLayers {
		if l < 0 || l >= layers {
			return nil, fmt.Errorf("%w: mlp_only_layers names layer %d of %d", ErrInvalidConfig, l, layers)
		}
	}
	return m, nil
}
