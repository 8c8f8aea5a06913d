package modelfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// gemmaEdits turns cfgJSON's Qwen3 config into a gemma3_text one of four
// layers.
func gemmaEdits(more obj) obj {
	e := obj{"architectures": []string{"Gemma3ForCausalLM"}, "model_type": "gemma3_text", "num_hidden_layers": 4}
	for k, v := range more {
		e[k] = v
	}
	return e
}

func TestParseGemmaConfig(t *testing.T) {
	tests := []struct {
		name  string
		edits obj
		want  GemmaConfig
	}{
		{"mlx-lm defaults", obj{}, GemmaConfig{QueryPreAttnScalar: 256, SlidingWindow: 512, RopeLocalBaseFreq: 10000,
			Sliding: []bool{true, true, true, true}}},
		{"pattern", obj{"sliding_window_pattern": 2, "sliding_window": 100, "query_pre_attn_scalar": 32, "rope_local_base_freq": 5000},
			GemmaConfig{QueryPreAttnScalar: 32, SlidingWindow: 100, RopeLocalBaseFreq: 5000, Sliding: []bool{true, false, true, false}}},
		{"layer_types win", obj{"sliding_window_pattern": 2, "layer_types": []string{"full_attention", "sliding_attention", "sliding_attention", "full_attention"}},
			GemmaConfig{QueryPreAttnScalar: 256, SlidingWindow: 512, RopeLocalBaseFreq: 10000, Sliding: []bool{false, true, true, false}}},
		{"soft-cap", obj{"final_logit_softcapping": 30.0, "attn_logit_softcapping": nil},
			GemmaConfig{QueryPreAttnScalar: 256, SlidingWindow: 512, RopeLocalBaseFreq: 10000, FinalLogitSoftcapping: 30,
				Sliding: []bool{true, true, true, true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(cfgJSON(t, gemmaEdits(tc.edits)))
			if err != nil {
				t.Fatal(err)
			}
			if c.Architecture != ArchGemma3Text || c.Gemma == nil || !reflect.DeepEqual(*c.Gemma, tc.want) {
				t.Fatalf("architecture %q, gemma %+v; want %+v", c.Architecture, c.Gemma, tc.want)
			}
		})
	}
	c, err := ParseConfig(cfgJSON(t, gemmaEdits(obj{"head_dim": nil, "hidden_size": 512})))
	if err != nil || c.HeadDim != 256 {
		t.Errorf("without head_dim: %v, head_dim %d; want Gemma's 256", err, c.HeadDim)
	}
	if c, err := ParseConfig(cfgJSON(t, nil)); err != nil || c.Gemma != nil {
		t.Errorf("a Qwen3 config has Gemma fields: %+v (%v)", c.Gemma, err)
	}
}

func TestParseGemmaConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		edits obj
		want  error
		msg   string
	}{
		{"zero window", obj{"sliding_window": 0}, ErrInvalidConfig, "sliding_window 0"},
		{"zero pattern", obj{"sliding_window_pattern": 0}, ErrInvalidConfig, "sliding_window_pattern 0"},
		{"layer_types too short", obj{"layer_types": []string{"full_attention"}}, ErrInvalidConfig, "1 layer_types for 4 layers"},
		{"layer_types unknown", obj{"layer_types": []string{"full_attention", "chunked", "full_attention", "full_attention"}}, ErrInvalidConfig, `"chunked"`},
		{"negative scalar", obj{"query_pre_attn_scalar": -1}, ErrInvalidConfig, "query_pre_attn_scalar"},
		{"zero local base", obj{"rope_local_base_freq": 0}, ErrInvalidConfig, "rope_local_base_freq"},
		{"zero soft-cap", obj{"final_logit_softcapping": 0}, ErrInvalidConfig, "final_logit_softcapping"},
		{"attention soft-cap", obj{"attn_logit_softcapping": 50.0}, ErrUnsupported, "attn_logit_softcapping"},
		{"other activation", obj{"hidden_activation": "silu"}, ErrUnsupported, "silu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(cfgJSON(t, gemmaEdits(tc.edits)))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}
