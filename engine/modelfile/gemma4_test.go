package modelfile

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestGemma4Config reads a gemma4_text config with mlx-lm's defaults and
// refuses what the engine does not run.
func TestGemma4Config(t *testing.T) {
	base := `"model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 6, "intermediate_size": 128,
		"num_attention_heads": 4, "vocab_size": 1000`
	c, err := ParseConfig([]byte(`{` + base + `, "head_dim": 16, "num_key_value_heads": 2, "num_kv_shared_layers": 1,
		"hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 1000, "sliding_window": 32,
		"enable_moe_block": true, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32,
		"rope_parameters": {"full_attention": {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
		                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}`))
	if err != nil {
		t.Fatal(err)
	}
	g := c.Gemma4
	// Default pattern 5: every fifth layer global; layer 5 shares layer 3's KV.
	if want := []bool{true, true, true, true, false, true}; !slices.Equal(g.Sliding, want) {
		t.Errorf("sliding %v, want %v", g.Sliding, want)
	}
	if want := []int{0, 1, 2, 3, 4, 3}; !slices.Equal(g.SharedFrom(), want) {
		t.Errorf("shared from %v, want %v", g.SharedFrom(), want)
	}
	// Layer 5 reads layer 3's KV: no later stage starts past 3.
	if got := c.MaxCut(); got != 3 {
		t.Errorf("MaxCut = %d, want 3", got)
	}
	if g.PerLayer != 8 || g.SlidingWindow != 32 || g.FinalLogitSoftcapping != 30 || !g.DoubleWideMLP || !c.TieWordEmbeddings {
		t.Errorf("config %+v", g)
	}
	// global_head_dim absent: mlx-lm's 512 on the full layers.
	if g.GlobalHeadDim != 512 || g.HeadDimOf(4, c.HeadDim) != 512 || g.HeadDimOf(5, c.HeadDim) != 16 {
		t.Errorf("global head dim %d, layer 4 %d, layer 5 %d", g.GlobalHeadDim, g.HeadDimOf(4, c.HeadDim), g.HeadDimOf(5, c.HeadDim))
	}
	// Own KV: five layers, four of 16 and one of 512, two heads, k and v.
	if got, want := c.KVFloatsPerPosition(), int64(2*2*(4*16+512)); got != want {
		t.Errorf("KV floats per position %d, want %d", got, want)
	}
	for extra, want := range map[string]int{`"global_head_dim": 32`: 32, `"global_head_dim": 0`: 16, `"global_head_dim": null`: 16} {
		e, err := ParseConfig([]byte(`{` + base + `, "head_dim": 16, "num_kv_shared_layers": 0, ` + extra + `}`))
		if err != nil {
			t.Errorf("%s: %v", extra, err)
		} else if e.Gemma4.GlobalHeadDim != want {
			t.Errorf("%s: global head dim %d, want %d", extra, e.Gemma4.GlobalHeadDim, want)
		}
	}
	if g.Global != (Gemma4Rope{Type: "proportional", Theta: 1e6, PartialRotary: 0.5, Factor: 1}) || g.Local.Theta != 1e4 {
		t.Errorf("ropes %+v %+v", g.Global, g.Local)
	}
	if c.MoE == nil || c.MoE.Experts != 4 || c.MoE.TopK != 2 || c.MoE.Intermediate != 32 || !c.MoE.Sparse(5) {
		t.Errorf("moe %+v", c.MoE)
	}
	d, err := ParseConfig([]byte(`{` + base + `, "num_kv_shared_layers": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.HeadDim != 256 || d.NumKeyValueHeads != 1 || d.Gemma4.PerLayer != 256 || d.MoE != nil {
		t.Errorf("defaults: head_dim %d, kv heads %d, moe %v", d.HeadDim, d.NumKeyValueHeads, d.MoE)
	}
	for _, tc := range []struct {
		extra string
		want  error
		text  string
	}{
		{`"head_dim": 16, "global_head_dim": 33`, ErrInvalidConfig, "global_head_dim 33 is odd"},
		{`"global_head_dim": "wide"`, ErrInvalidConfig, "global_head_dim"},
		{`"global_head_dim": -2`, ErrInvalidConfig, "global_head_dim"},
		{`"attention_k_eq_v": true, "num_key_value_heads": 2, "num_global_key_value_heads": 1`, ErrUnsupported, "num_global_key_value_heads"},
		{`"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 2}}`, ErrUnsupported, "rope_type"},
		{`"num_kv_shared_layers": 7`, ErrInvalidConfig, "num_kv_shared_layers"},
		{`"num_kv_shared_layers": 20`, ErrInvalidConfig, "num_kv_shared_layers 20"}, // mlx-lm's default, more than the layers
		{`"layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "sliding_attention", "sliding_attention"], "num_kv_shared_layers": 2`, ErrInvalidConfig, "no earlier layer"},
		{`"enable_moe_block": true, "num_experts": 4`, ErrInvalidConfig, "top_k_experts"},
		{`"final_logit_softcapping": -1`, ErrInvalidConfig, "final_logit_softcapping"},
	} {
		// Later keys win: the case's own num_kv_shared_layers replaces 0.
		_, err := ParseConfig([]byte(`{` + base + `, "num_kv_shared_layers": 0, ` + tc.extra + `}`))
		if !errors.Is(err, tc.want) || !strings.Contains(fmt_(err), tc.text) {
			t.Errorf("%s: %v, want %v about %s", tc.extra, err, tc.want, tc.text)
		}
	}
}

func fmt_(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
