package modelfile

import (
	"encoding/json"
	"fmt"
)

// MLA is DeepSeek-V3's multi-head latent attention, as mlx-lm's
// deepseek_v3.py reads its keys (its defaults are that file's). Queries
// go through a low-rank q_a_proj → q_a_layernorm → q_b_proj (or one
// q_proj when q_lora_rank is null); keys and values share one compressed
// latent of KVLoraRank features per position (kv_a_proj_with_mqa, then
// kv_a_layernorm) plus RopeDim rotated key features shared by every head.
// Each head's query has NopeDim + RopeDim features, its value VDim.
type MLA struct {
	QLoraRank  int `json:"q_lora_rank"` // 0: q_proj
	KVLoraRank int `json:"kv_lora_rank"`
	NopeDim    int `json:"qk_nope_head_dim"`
	RopeDim    int `json:"qk_rope_head_dim"`
	VDim       int `json:"v_head_dim"`
}

// CacheDim is the width of what MLA caches per position and layer: the
// latent and the rotated key features.
func (m *MLA) CacheDim() int { return m.KVLoraRank + m.RopeDim }

// Router is a sigmoid-scored, group-limited mixture's routing (DeepSeek-V3,
// GLM-4.5; mlx-lm's group_expert_select): scores σ(logits) plus
// e_score_correction_bias choose the experts — within the TopKGroups
// groups (of Groups) whose two best scores sum highest — and the chosen
// experts' σ scores, renormalized if MoE.NormTopK (and k > 1), times
// ScalingFactor weigh them. SharedExperts experts of the same width run
// on every token beside them (one MLP of SharedExperts·Intermediate).
type Router struct {
	Groups        int     `json:"n_group"`
	TopKGroups    int     `json:"topk_group"`
	ScalingFactor float64 `json:"routed_scaling_factor"`
	SharedExperts int     `json:"n_shared_experts"`
	// FirstDense layers have a dense MLP of intermediate_size; after
	// them, every LayerFreq-th layer is sparse (first_k_dense_replace,
	// moe_layer_freq).
	FirstDense int `json:"first_k_dense_replace"`
	LayerFreq  int `json:"moe_layer_freq"`
}

// Sparse reports whether layer l has the mixture (mlx-lm: l ≥
// first_k_dense_replace and l % moe_layer_freq == 0).
func (r *Router) Sparse(l int) bool { return l >= r.FirstDense && l%r.LayerFreq == 0 }

// rawRouter is the keys of a sigmoid-routed mixture (DeepSeek-V3,
// GLM-4.5) and what comes with them.
type rawRouter struct {
	RoutedExperts    *int64   `json:"n_routed_experts"`
	SharedExperts    *int64   `json:"n_shared_experts"`
	TopK             *int64   `json:"num_experts_per_tok"`
	MoEIntermediate  *int64   `json:"moe_intermediate_size"`
	ScalingFactor    *float64 `json:"routed_scaling_factor"`
	TopKMethod       *string  `json:"topk_method"`
	NormTopK         *bool    `json:"norm_topk_prob"`
	Groups           *int64   `json:"n_group"`
	TopKGroups       *int64   `json:"topk_group"`
	FirstDense       *int64   `json:"first_k_dense_replace"`
	LayerFreq        *int64   `json:"moe_layer_freq"`
	TieWordEmbedding *bool    `json:"tie_word_embeddings"`
}

// intField is an integer key: its value (nil: absent), where it goes, its
// default and its range.
type intField struct {
	name   string
	v      *int64
	dst    *int
	def    int64
	lo, hi int64
}

// setInts fills the fields, with their defaults, and checks their ranges.
func setInts(arch string, fields []intField) error {
	for _, f := range fields {
		x := f.def
		if f.v != nil {
			x = *f.v
		}
		if x < f.lo || x > f.hi {
			return fmt.Errorf("%w: %s: %s %d out of range [%d, %d]", ErrInvalidConfig, arch, f.name, x, f.lo, f.hi)
		}
		*f.dst = int(x)
	}
	return nil
}

// common checks what both sigmoid-routed families refuse: another
// topk_method than noaux_tc (the only one mlx-lm runs) and tied
// embeddings (mlx-lm always reads an lm_head).
func (r *rawRouter) common(c *Config) error {
	if r.TopKMethod != nil && *r.TopKMethod != "noaux_tc" {
		return fmt.Errorf("%w: %s topk_method %q (mlx-lm runs noaux_tc only)", ErrUnsupported, c.Architecture, *r.TopKMethod)
	}
	if r.TieWordEmbedding != nil && *r.TieWordEmbedding {
		return fmt.Errorf("%w: %s with tied embeddings (mlx-lm always reads an lm_head)", ErrUnsupported, c.Architecture)
	}
	c.TieWordEmbeddings = false
	return nil
}

// router sets c's MoE and Router from the keys, with the family's
// defaults for moe_intermediate_size and n_shared_experts (mlx-lm's).
func (r *rawRouter) router(c *Config, intermediate, shared int64) error {
	moe := &MoE{NormTopK: orBool(r.NormTopK, true), SparseStep: 1}
	rt := &Router{ScalingFactor: 1}
	if r.ScalingFactor != nil {
		rt.ScalingFactor = *r.ScalingFactor
		if !positive(rt.ScalingFactor) {
			return fmt.Errorf("%w: %s: routed_scaling_factor %v is not positive", ErrInvalidConfig, c.Architecture, rt.ScalingFactor)
		}
	}
	err := setInts(c.Architecture, []intField{
		{"n_routed_experts", r.RoutedExperts, &moe.Experts, 0, 1, maxExperts},
		{"num_experts_per_tok", r.TopK, &moe.TopK, 1, 1, maxExperts},
		{"moe_intermediate_size", r.MoEIntermediate, &moe.Intermediate, intermediate, 1, maxIntermediate},
		{"n_shared_experts", r.SharedExperts, &rt.SharedExperts, shared, 0, maxExperts},
		{"n_group", r.Groups, &rt.Groups, 1, 1, maxExperts},
		{"topk_group", r.TopKGroups, &rt.TopKGroups, 1, 1, maxExperts},
		{"first_k_dense_replace", r.FirstDense, &rt.FirstDense, 0, 0, maxLayers},
		{"moe_layer_freq", r.LayerFreq, &rt.LayerFreq, 1, 1, maxLayers},
	})
	if err != nil {
		return err
	}
	return c.checkRouter(moe, rt)
}

// deepseekV3 reads DeepSeek-V3's keys with mlx-lm's defaults: MLA, the
// sigmoid router, an untied lm_head.
func (c *Config) deepseekV3(data []byte) error {
	var r struct {
		rawRouter
		QLoraRank  json.RawMessage `json:"q_lora_rank"`
		KVLoraRank *int64          `json:"kv_lora_rank"`
		NopeDim    *int64          `json:"qk_nope_head_dim"`
		RopeDim    *int64          `json:"qk_rope_head_dim"`
		VDim       *int64          `json:"v_head_dim"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: deepseek_v3: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if err := r.common(c); err != nil {
		return err
	}
	m := &MLA{}
	if !isNull(r.QLoraRank) {
		var q int64
		if err := json.Unmarshal(r.QLoraRank, &q); err != nil {
			return bad("q_lora_rank: %v", err)
		}
		if q < 1 || q > maxHidden {
			return bad("q_lora_rank %d out of range [1, %d]", q, maxHidden)
		}
		m.QLoraRank = int(q)
	} else if r.QLoraRank == nil {
		m.QLoraRank = 1536
	}
	err := setInts(c.Architecture, []intField{
		{"kv_lora_rank", r.KVLoraRank, &m.KVLoraRank, 512, 1, maxHidden},
		{"qk_nope_head_dim", r.NopeDim, &m.NopeDim, 128, 1, maxHeadDim},
		{"qk_rope_head_dim", r.RopeDim, &m.RopeDim, 64, 2, maxHeadDim},
		{"v_head_dim", r.VDim, &m.VDim, 128, 1, maxHeadDim},
	})
	if err != nil {
		return err
	}
	if m.RopeDim%2 != 0 {
		return bad("qk_rope_head_dim %d is odd (RoPE rotates pairs)", m.RopeDim)
	}
	c.MLA = m
	if r.RoutedExperts == nil { // mlx-lm: no mixture at all
		return nil
	}
	return r.router(c, 1407, 0)
}

// checkRouter checks a sigmoid router's sizes and sets c's MoE and Router.
func (c *Config) checkRouter(moe *MoE, rt *Router) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, c.Architecture, fmt.Sprintf(format, args...))
	}
	switch {
	case moe.TopK > moe.Experts:
		return bad("num_experts_per_tok %d exceeds %d experts", moe.TopK, moe.Experts)
	case moe.Experts%rt.Groups != 0:
		return bad("n_group %d does not divide %d experts", rt.Groups, moe.Experts)
	case rt.TopKGroups > rt.Groups:
		return bad("topk_group %d exceeds n_group %d", rt.TopKGroups, rt.Groups)
	case rt.Groups > 1 && moe.Experts/rt.Groups < 2:
		return bad("groups of %d experts (mlx-lm scores a group by its best two)", moe.Experts/rt.Groups)
	}
	c.MoE, c.Router = moe, rt
	return nil
}
