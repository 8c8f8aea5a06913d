package modelfile

import (
	"encoding/json"
	"fmt"
)

// ArchGemma4Text is Gemma 4's text model (mlx-lm's gemma4_text):
// sliding/global layers, per-layer inputs, KV shared by the last layers,
// an optional mixture beside the MLP; see Gemma4.
const ArchGemma4Text = "gemma4_text"

// Gemma4 is what Gemma 4's config.json adds to the common fields, with
// mlx-lm 0.32.2's defaults (models/gemma4_text.py).
type Gemma4 struct {
	// SlidingWindow is the number of positions a sliding layer's query
	// sees (itself included); Sliding marks those layers.
	SlidingWindow int    `json:"sliding_window"`
	Sliding       []bool `json:"sliding"`
	// GlobalHeadDim is the head width of the full-attention layers
	// (global_head_dim; Gemma 4 E2B/E4B: 512 beside head_dim 256): their
	// queries, keys, values, q/k norms and RoPE. See HeadDimOf.
	GlobalHeadDim int `json:"global_head_dim,omitempty"`
	// KEqV: full-attention layers use their keys as values
	// (attention_k_eq_v).
	KEqV bool `json:"k_eq_v,omitempty"`
	// KVShared is num_kv_shared_layers: the last KVShared layers have no
	// K/V of their own and attend over the cache of the last earlier
	// layer of their kind.
	KVShared int `json:"kv_shared_layers,omitempty"`
	// PerLayer is hidden_size_per_layer_input (0: no per-layer inputs);
	// PerLayerVocab is vocab_size_per_layer_input.
	PerLayer      int `json:"per_layer,omitempty"`
	PerLayerVocab int `json:"per_layer_vocab,omitempty"`
	// DoubleWideMLP doubles the MLP width of the KV-shared layers.
	DoubleWideMLP bool `json:"double_wide_mlp,omitempty"`
	// FinalLogitSoftcapping caps the logits at ±cap through tanh (0: none).
	FinalLogitSoftcapping float64 `json:"final_logit_softcapping,omitempty"`
	// Local and Global are the RoPE of sliding and full layers.
	Local, Global Gemma4Rope `json:"-"`
}

// Gemma4Rope is one layer kind's rope_parameters entry: "default"
// rotates every feature; "proportional" (mlx-lm's ProportionalRoPE)
// rotates the first PartialRotary share of the frequencies of the whole
// head (periods Factor·Theta^(2i/head_dim)), the rest unrotated.
type Gemma4Rope struct {
	Type          string
	Theta         float64
	PartialRotary float64
	Factor        float64
}

// SharedFrom returns, for each layer, the layer whose KV cache it
// attends over: itself, or for a KV-shared layer the last layer before
// the shared ones of the same kind (mlx-lm's previous_kvs).
func (g *Gemma4) SharedFrom() []int {
	n := len(g.Sliding)
	from := make([]int, n)
	last := map[bool]int{}
	for i := range n {
		from[i] = i
		if i < n-g.KVShared {
			last[g.Sliding[i]] = i
		} else {
			from[i] = last[g.Sliding[i]]
		}
	}
	return from
}

// HeadDimOf is layer l's head width: GlobalHeadDim on a full-attention
// layer, hd (the config's head_dim) on a sliding one. A KV-shared layer
// has its source's width (the same kind).
func (g *Gemma4) HeadDimOf(l, hd int) int {
	if !g.Sliding[l] && g.GlobalHeadDim > 0 {
		return g.GlobalHeadDim
	}
	return hd
}

// MaxCut is the last layer a pipeline stage may start at, past 0, so
// that every KV-shared layer is in the stage of the layer whose KV it
// reads: the KV-shared layers are the last ones, so every cut must come
// at or before the earliest of their sources (E2B: 13 of 35). n is the
// number of layers; n when no layer shares KV.
func (g *Gemma4) MaxCut(n int) int {
	from := g.SharedFrom()
	cut := n
	for l := n - g.KVShared; l < n; l++ {
		cut = min(cut, from[l])
	}
	return cut
}

type rawGemma4 struct {
	SlidingWindow           *int64                     `json:"sliding_window"`
	SlidingWindowPattern    *int64                     `json:"sliding_window_pattern"`
	LayerTypes              []string                   `json:"layer_types"`
	GlobalHeadDim           json.RawMessage            `json:"global_head_dim"`
	NumGlobalKVHeads        *int64                     `json:"num_global_key_value_heads"`
	AttentionKEqV           *bool                      `json:"attention_k_eq_v"`
	NumKVSharedLayers       *int64                     `json:"num_kv_shared_layers"`
	HiddenSizePerLayerInput *int64                     `json:"hidden_size_per_layer_input"`
	VocabSizePerLayerInput  *int64                     `json:"vocab_size_per_layer_input"`
	UseDoubleWideMLP        *bool                      `json:"use_double_wide_mlp"`
	FinalLogitSoftcapping   json.RawMessage            `json:"final_logit_softcapping"`
	EnableMoEBlock          *bool                      `json:"enable_moe_block"`
	NumExperts              *int64                     `json:"num_experts"`
	TopKExperts             *int64                     `json:"top_k_experts"`
	MoEIntermediateSize     *int64                     `json:"moe_intermediate_size"`
	RopeParameters          map[string]json.RawMessage `json:"rope_parameters"`
	RopeTraditional         *bool                      `json:"rope_traditional"`
}

// gemma4 reads Gemma 4's fields (c holds the common ones; head_dim
// defaults to 256 and num_key_value_heads to 1, as mlx-lm's).
func (c *Config) gemma4(data []byte, r *rawConfig) error {
	var g4 rawGemma4
	if err := json.Unmarshal(data, &g4); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: gemma4_text: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	unsupported := func(format string, args ...any) error {
		return fmt.Errorf("%w: gemma4_text: %s", ErrUnsupported, fmt.Sprintf(format, args...))
	}
	if r.HeadDim == nil {
		c.HeadDim = 256
	}
	if r.NumKeyValueHeads == nil {
		c.NumKeyValueHeads = 1
	}
	n := c.NumHiddenLayers
	g := &Gemma4{SlidingWindow: 512, KVShared: 20, PerLayer: 256, PerLayerVocab: 262144, DoubleWideMLP: true, FinalLogitSoftcapping: 30}
	intIn := func(name string, v *int64, lo, hi int64, dst *int) error {
		if v == nil {
			return nil
		}
		if *v < lo || *v > hi {
			return bad("%s %d out of range [%d, %d]", name, *v, lo, hi)
		}
		*dst = int(*v)
		return nil
	}
	for _, f := range []struct {
		name   string
		v      *int64
		lo, hi int64
		dst    *int
	}{
		{"sliding_window", g4.SlidingWindow, 1, maxPositions, &g.SlidingWindow},
		{"num_kv_shared_layers", g4.NumKVSharedLayers, 0, int64(n), &g.KVShared},
		{"hidden_size_per_layer_input", g4.HiddenSizePerLayerInput, 0, maxHidden, &g.PerLayer},
		{"vocab_size_per_layer_input", g4.VocabSizePerLayerInput, 1, maxVocab, &g.PerLayerVocab},
	} {
		if err := intIn(f.name, f.v, f.lo, f.hi, f.dst); err != nil {
			return err
		}
	}
	// mlx-lm: 512 when the key is absent; head_dim when it is 0 or null.
	g.GlobalHeadDim = 512
	if g4.GlobalHeadDim != nil {
		var v *int64
		if err := json.Unmarshal(g4.GlobalHeadDim, &v); err != nil {
			return bad("global_head_dim %s is not an integer", g4.GlobalHeadDim)
		}
		g.GlobalHeadDim = c.HeadDim
		if err := intIn("global_head_dim", v, 0, maxHidden, &g.GlobalHeadDim); err != nil {
			return err
		}
		if g.GlobalHeadDim == 0 {
			g.GlobalHeadDim = c.HeadDim
		}
	}
	if g.GlobalHeadDim%2 != 0 {
		return bad("global_head_dim %d is odd", g.GlobalHeadDim)
	}
	g.KEqV = orBool(g4.AttentionKEqV, false)
	if g.KEqV && g4.NumGlobalKVHeads != nil && int(*g4.NumGlobalKVHeads) != c.NumKeyValueHeads {
		return unsupported("num_global_key_value_heads %d ≠ num_key_value_heads %d", *g4.NumGlobalKVHeads, c.NumKeyValueHeads)
	}
	if orBool(g4.RopeTraditional, false) {
		return unsupported("rope_traditional")
	}
	g.DoubleWideMLP = orBool(g4.UseDoubleWideMLP, true)
	if !isNull(g4.FinalLogitSoftcapping) {
		if err := json.Unmarshal(g4.FinalLogitSoftcapping, &g.FinalLogitSoftcapping); err != nil || !positive(g.FinalLogitSoftcapping) {
			return bad("final_logit_softcapping %s is not a positive number", g4.FinalLogitSoftcapping)
		}
	} else if g4.FinalLogitSoftcapping != nil {
		g.FinalLogitSoftcapping = 0
	}
	var err error
	if g4.LayerTypes != nil {
		if g.Sliding, err = layerTypes(g4.LayerTypes, n); err != nil {
			return fmt.Errorf("%w: gemma4_text: %w", ErrInvalidConfig, err)
		}
	} else {
		pattern := 5
		if err := intIn("sliding_window_pattern", g4.SlidingWindowPattern, 1, maxLayers, &pattern); err != nil {
			return err
		}
		g.Sliding = make([]bool, n)
		for i := range g.Sliding {
			g.Sliding[i] = (i+1)%pattern != 0
		}
	}
	if g.KVShared > n {
		return bad("num_kv_shared_layers %d of %d layers", g.KVShared, n)
	}
	if g.KVShared > 0 {
		for i := n - g.KVShared; i < n; i++ {
			found := false
			for j := range n - g.KVShared {
				found = found || g.Sliding[j] == g.Sliding[i]
			}
			if !found {
				return bad("KV-shared layer %d has no earlier layer of its kind", i)
			}
		}
	}
	g.Local = Gemma4Rope{Type: "default", Theta: 10000, PartialRotary: 1, Factor: 1}
	g.Global = Gemma4Rope{Type: "proportional", Theta: 1e6, PartialRotary: 0.25, Factor: 1}
	if g4.RopeParameters != nil {
		for key, dst := range map[string]*Gemma4Rope{"sliding_attention": &g.Local, "full_attention": &g.Global} {
			raw, ok := g4.RopeParameters[key]
			if !ok {
				*dst = Gemma4Rope{Type: "default", Theta: 10000, PartialRotary: 1, Factor: 1}
				continue
			}
			var p struct {
				RopeType      *string  `json:"rope_type"`
				RopeTheta     *float64 `json:"rope_theta"`
				PartialRotary *float64 `json:"partial_rotary_factor"`
				Factor        *float64 `json:"factor"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return bad("rope_parameters.%s: %v", key, err)
			}
			rp := Gemma4Rope{Type: "default", Theta: 10000, PartialRotary: 1, Factor: 1}
			if p.RopeType != nil {
				rp.Type = *p.RopeType
			}
			if p.RopeTheta != nil {
				rp.Theta = *p.RopeTheta
			}
			if p.PartialRotary != nil {
				rp.PartialRotary = *p.PartialRotary
			}
			if p.Factor != nil {
				rp.Factor = *p.Factor
			}
			switch {
			case rp.Type != "default" && rp.Type != "proportional":
				return unsupported("rope_parameters.%s: rope_type %q (want default or proportional)", key, rp.Type)
			case !positive(rp.Theta) || !positive(rp.Factor) || !(rp.PartialRotary > 0 && rp.PartialRotary <= 1):
				return bad("rope_parameters.%s: theta %v, factor %v, partial_rotary_factor %v", key, rp.Theta, rp.Factor, rp.PartialRotary)
			}
			*dst = rp
		}
	}
	if orBool(g4.EnableMoEBlock, false) {
		m := &MoE{SparseStep: 1}
		for _, f := range []struct {
			name string
			v    *int64
			dst  *int
		}{{"num_experts", g4.NumExperts, &m.Experts}, {"top_k_experts", g4.TopKExperts, &m.TopK}, {"moe_intermediate_size", g4.MoEIntermediateSize, &m.Intermediate}} {
			if f.v == nil {
				return bad("enable_moe_block without %s", f.name)
			}
			if err := intIn(f.name, f.v, 1, maxIntermediate, f.dst); err != nil {
				return err
			}
		}
		if m.TopK > m.Experts || m.Experts > maxExperts {
			return bad("top_k_experts %d of num_experts %d", m.TopK, m.Experts)
		}
		c.MoE = m
	}
	c.Gemma4 = g
	return nil
}
