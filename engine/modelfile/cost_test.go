package modelfile

import (
	"math"
	"slices"
	"testing"
)

func TestHeadLayers(t *testing.T) {
	qwen06 := Config{HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28, NumAttentionHeads: 16,
		NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 151936}
	moe := qwen06
	moe.MoE = &MoE{Experts: 8, TopK: 2, Intermediate: 768, SparseStep: 2}
	for _, tc := range []struct {
		name string
		c    Config
		want float64
	}{
		// 151,936 × 1,024 against 2·1024·2048 + 2·1024·1024 + 3·1024·3072 per layer.
		{"qwen3-0.6b", qwen06, 151936.0 * 1024 / (2*1024*2048 + 2*1024*1024 + 3*1024*3072)},
		// Every other layer reads 2 experts of 768 instead of 3072 wide.
		{"mixture", moe, 151936.0 * 1024 / (2*1024*2048 + 2*1024*1024 + (3*1024*3072+3*1024*768*2)/2.0)},
		{"no sizes", Config{}, 0},
	} {
		if got := tc.c.HeadLayers(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFootprint files tensors of either spelling by layer: experts read
// at the routed share, the head on the last stage (the embeddings again
// when tied), what the text model does not load left out.
func TestFootprint(t *testing.T) {
	moe := &Config{NumHiddenLayers: 2, MoE: &MoE{Experts: 8, TopK: 2}}
	for _, tc := range []struct {
		name    string
		c       *Config
		tensors map[string]int64
		want    Footprint
	}{
		{"mlx-lm mixture, untied", moe, map[string]int64{
			"model.embed_tokens.weight": 1000, "model.norm.weight": 10, "lm_head.weight": 900, "lm_head.scales": 100,
			"model.layers.0.self_attn.q_proj.weight": 50, "model.layers.0.mlp.gate.weight": 8,
			"model.layers.0.mlp.switch_mlp.up_proj.weight": 800, "model.layers.0.mlp.switch_mlp.up_proj.scales": 80,
			"model.layers.1.mlp.shared_experts.up_proj.weight": 40, "model.layers.1.mlp.experts.gate_up_proj.weight": 1600,
			"model.layers.2.eh_proj.weight":                5000, // a multi-token prediction layer
			"vision_tower.encoder.layers.0.mlp.fc1.weight": 7000,
		}, Footprint{Bytes: []int64{938, 1640}, Read: []int64{50 + 8 + 200 + 20, 40 + 400}, First: 1000, Last: 1010, HeadRead: 1000}},
		{"gguf mixture, tied", moe, map[string]int64{
			"token_embd.weight": 1000, "output_norm.weight": 10, "rope_freqs.weight": 4,
			"blk.0.attn_q.weight": 50, "blk.0.ffn_gate_inp.weight": 8, "blk.0.ffn_up_exps.weight": 800,
			"blk.1.ffn_down_shexp.weight": 40, "blk.1.ffn_gate_exps.weight": 1600,
		}, Footprint{Bytes: []int64{858, 1640}, Read: []int64{50 + 8 + 200, 40 + 400}, First: 1004, Last: 1010, HeadRead: 1000}},
		{"dense, wrapped, gemma 4's per-layer embeddings", &Config{NumHiddenLayers: 1}, map[string]int64{
			"language_model.model.embed_tokens.weight": 300, "language_model.model.embed_tokens_per_layer.weight": 70,
			"language_model.model.per_layer_projection_norm.weight": 2, "language_model.model.norm.weight": 3,
			"language_model.model.layers.0.mlp.up_proj.weight": 20,
		}, Footprint{Bytes: []int64{20}, Read: []int64{20}, First: 372, Last: 303, HeadRead: 300}},
		// Qwen3.5/3.6, Mistral Small 3.x: an untied head inside the wrapper.
		{"dense, wrapped, untied", &Config{NumHiddenLayers: 1}, map[string]int64{
			"language_model.model.embed_tokens.weight": 300, "language_model.lm_head.weight": 250, "language_model.lm_head.scales": 50,
			"language_model.model.norm.weight": 3, "language_model.model.layers.0.mlp.up_proj.weight": 20,
		}, Footprint{Bytes: []int64{20}, Read: []int64{20}, First: 300, Last: 303, HeadRead: 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.c.Footprint(tc.tensors)
			if !slices.Equal(got.Bytes, tc.want.Bytes) || !slices.Equal(got.Read, tc.want.Read) ||
				got.First != tc.want.First || got.Last != tc.want.Last || got.HeadRead != tc.want.HeadRead {
				t.Fatalf("Footprint = %+v, want %+v", got, tc.want)
			}
		})
	}
	layers, head := Footprint{Read: []int64{100, 300}, HeadRead: 400}.Compute()
	if !slices.Equal(layers, []float64{0.5, 1.5}) || head != 2 {
		t.Errorf("Compute = %v, %v; want [0.5 1.5], 2", layers, head)
	}
}
