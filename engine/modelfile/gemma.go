package modelfile

import (
	"encoding/json"
	"fmt"
	"slices"
)

// GemmaConfig is what Gemma 3's config.json adds to the common fields,
// with mlx-lm's defaults (models/gemma3_text.py).
type GemmaConfig struct {
	// QueryPreAttnScalar sets the attention scale, its −½ power.
	QueryPreAttnScalar float64 `json:"query_pre_attn_scalar"`
	// SlidingWindow is the number of positions a local layer's query sees
	// (itself included).
	SlidingWindow int `json:"sliding_window"`
	// Sliding says, per layer, whether it is a local (sliding-window)
	// layer: from layer_types, else every layer but each
	// sliding_window_pattern-th.
	Sliding []bool `json:"sliding"`
	// RopeLocalBaseFreq is the RoPE base of the local layers, which have
	// no RoPE scaling; the global ones use rope_theta and rope_scaling.
	RopeLocalBaseFreq float64 `json:"rope_local_base_freq"`
	// FinalLogitSoftcapping caps the logits at ±cap through tanh (0: none).
	FinalLogitSoftcapping float64 `json:"final_logit_softcapping,omitempty"`
}

type rawGemma struct {
	HeadDim               *int64   `json:"head_dim"`
	QueryPreAttnScalar    *float64 `json:"query_pre_attn_scalar"`
	SlidingWindow         *int64   `json:"sliding_window"`
	SlidingWindowPattern  *int64   `json:"sliding_window_pattern"`
	LayerTypes            []string `json:"layer_types"`
	RopeLocalBaseFreq     *float64 `json:"rope_local_base_freq"`
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
	AttnLogitSoftcapping  *float64 `json:"attn_logit_softcapping"`
	HiddenActivation      *string  `json:"hidden_activation"`
	HiddenAct             *string  `json:"hidden_act"`
}

// parseGemma reads Gemma 3's fields of a config.json; c holds the common
// ones (a missing head_dim is set to Gemma's 256 here).
func parseGemma(data []byte, c *Config) (*GemmaConfig, error) {
	var r rawGemma
	var err error
	if err = json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: gemma3_text: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if r.HeadDim == nil {
		c.HeadDim = 256
	}
	g := &GemmaConfig{QueryPreAttnScalar: 256, SlidingWindow: 512, RopeLocalBaseFreq: 10000}
	if r.QueryPreAttnScalar != nil {
		g.QueryPreAttnScalar = *r.QueryPreAttnScalar
		if !positive(g.QueryPreAttnScalar) {
			return nil, bad("query_pre_attn_scalar %v is not positive", g.QueryPreAttnScalar)
		}
	}
	if r.SlidingWindow != nil {
		if *r.SlidingWindow <= 0 || *r.SlidingWindow > maxPositions {
			return nil, bad("sliding_window %d out of range [1, %d]", *r.SlidingWindow, maxPositions)
		}
		g.SlidingWindow = int(*r.SlidingWindow)
	}
	if r.RopeLocalBaseFreq != nil {
		g.RopeLocalBaseFreq = *r.RopeLocalBaseFreq
		if !positive(g.RopeLocalBaseFreq) {
			return nil, bad("rope_local_base_freq %v is not positive", g.RopeLocalBaseFreq)
		}
	}
	if v := r.FinalLogitSoftcapping; v != nil {
		if !positive(*v) {
			return nil, bad("final_logit_softcapping %v is not positive", *v)
		}
		g.FinalLogitSoftcapping = *v
	}
	if r.AttnLogitSoftcapping != nil {
		return nil, fmt.Errorf("%w: gemma3_text: attn_logit_softcapping (Gemma 2's) is not supported", ErrUnsupported)
	}
	for _, act := range []*string{r.HiddenActivation, r.HiddenAct} {
		if act != nil && *act != "gelu_pytorch_tanh" && *act != "gelu_tanh" {
			return nil, fmt.Errorf("%w: gemma3_text: activation %q (want gelu_pytorch_tanh)", ErrUnsupported, *act)
		}
	}
	g.Sliding = make([]bool, c.NumHiddenLayers)
	switch {
	case r.LayerTypes != nil:
		if g.Sliding, err = layerTypes(r.LayerTypes, c.NumHiddenLayers); err != nil {
			return nil, fmt.Errorf("%w: gemma3_text: %w", ErrInvalidConfig, err)
		}
	default:
		pattern := int64(6)
		if r.SlidingWindowPattern != nil {
			pattern = *r.SlidingWindowPattern
		}
		if pattern <= 0 || pattern > maxLayers {
			return nil, bad("sliding_window_pattern %d out of range [1, %d]", pattern, maxLayers)
		}
		for i := range g.Sliding {
			g.Sliding[i] = (i+1)%int(pattern) != 0
		}
	}
	return g, nil
}

// layerTypes reads layer_types: true for each "sliding_attention" layer.
func layerTypes(types []string, layers int) ([]bool, error) {
	if len(types) != layers {
		return nil, fmt.Errorf("%d layer_types for %d layers", len(types), layers)
	}
	sliding := make([]bool, layers)
	for i, t := range types {
		switch t {
		case "sliding_attention":
			sliding[i] = true
		case "full_attention":
		default:
			return nil, fmt.Errorf("layer_types[%d] is %q (want sliding_attention or full_attention)", i, t)
		}
	}
	return sliding, nil
}

// parseLlamaWindows reads the sliding-window layers of a llama or mistral
// config as mlx-lm's llama.py does: only layers layer_types names
// "sliding_attention" use sliding_window (a sliding_window alone, as
// Mistral 7B v0.1 has, changes nothing). It returns a nil list when no
// layer slides.
func parseLlamaWindows(data []byte, layers int) (int, []bool, error) {
	var r struct {
		SlidingWindow *int64   `json:"sliding_window"`
		LayerTypes    []string `json:"layer_types"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if r.LayerTypes == nil {
		return 0, nil, nil
	}
	sliding, err := layerTypes(r.LayerTypes, layers)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if !slices.Contains(sliding, true) {
		return 0, nil, nil
	}
	if r.SlidingWindow == nil || *r.SlidingWindow <= 0 || *r.SlidingWindow > maxPositions {
		return 0, nil, fmt.Errorf("%w: sliding_attention layers need a sliding_window in [1, %d]", ErrInvalidConfig, maxPositions)
	}
	return int(*r.SlidingWindow), sliding, nil
}
