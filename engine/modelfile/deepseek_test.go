package modelfile

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// deepseekJSON is a DeepSeek-V3-shaped config (hidden 64, 4 heads) with
// the given keys replaced (nil deletes).
func deepseekJSON(t *testing.T, edits map[string]any) []byte {
	t.Helper()
	base := obj{
		"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3", "head_dim": nil, "num_key_value_heads": 4,
		"q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 24,
		"n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
		"routed_scaling_factor": 2.5, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true,
		"n_group": 4, "topk_group": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1, "tie_word_embeddings": false,
		"rope_scaling": obj{"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
			"original_max_position_embeddings": 4096},
	}
	return cfgJSON(t, withEdits(base, edits))
}

func TestParseDeepseekV3(t *testing.T) {
	tests := []configCase{
		{"deepseek-v3's keys", nil, func(t *testing.T, c *Config) {
			mla := &MLA{QLoraRank: 48, KVLoraRank: 32, NopeDim: 16, RopeDim: 8, VDim: 24}
			moe := &MoE{Experts: 8, TopK: 2, Intermediate: 32, SparseStep: 1, NormTopK: true}
			rt := &Router{Groups: 4, TopKGroups: 2, ScalingFactor: 2.5, SharedExperts: 1, FirstDense: 1, LayerFreq: 1}
			if c.Architecture != ArchDeepseekV3 || !reflect.DeepEqual(c.MLA, mla) || !reflect.DeepEqual(c.MoE, moe) || !reflect.DeepEqual(c.Router, rt) || c.TieWordEmbeddings {
				t.Errorf("got %q %+v %+v %+v tied %v", c.Architecture, c.MLA, c.MoE, c.Router, c.TieWordEmbeddings)
			}
			if h, d := c.KVDims(); h != 1 || d != 40 {
				t.Errorf("KV dims %d × %d, want one head of 40", h, d)
			}
			if c.Router.Sparse(0) || !c.Router.Sparse(1) {
				t.Errorf("layer 0 sparse %v, layer 1 %v", c.Router.Sparse(0), c.Router.Sparse(1))
			}
		}, nil},
		{"mlx-lm's defaults", obj{"q_lora_rank": nil, "kv_lora_rank": nil, "qk_nope_head_dim": nil, "qk_rope_head_dim": nil,
			"v_head_dim": nil, "n_group": nil, "topk_group": nil, "routed_scaling_factor": nil, "n_shared_experts": nil,
			"first_k_dense_replace": nil, "moe_layer_freq": nil, "norm_topk_prob": nil, "tie_word_embeddings": nil}, func(t *testing.T, c *Config) {
			if c.MLA.QLoraRank != 1536 || c.MLA.KVLoraRank != 512 || c.MLA.RopeDim != 64 || c.Router.ScalingFactor != 1 || c.Router.SharedExperts != 0 || !c.MoE.NormTopK {
				t.Errorf("got %+v %+v %+v", c.MLA, c.Router, c.MoE)
			}
		}, nil},
		{"q_lora_rank null: q_proj", obj{"q_lora_rank": json.RawMessage("null")}, func(t *testing.T, c *Config) {
			if c.MLA.QLoraRank != 0 {
				t.Errorf("q_lora_rank %d", c.MLA.QLoraRank)
			}
		}, nil},
		{"q_lora_rank a string", obj{"q_lora_rank": "48"}, nil, ErrInvalidConfig},
		{"no routed experts: dense", obj{"n_routed_experts": nil}, func(t *testing.T, c *Config) {
			if c.MoE != nil || c.Router != nil {
				t.Errorf("got %+v %+v", c.MoE, c.Router)
			}
		}, nil},
		{"another topk_method", obj{"topk_method": "greedy"}, nil, ErrUnsupported},
		{"tied", obj{"tie_word_embeddings": true}, nil, ErrUnsupported},
		{"groups do not divide the experts", obj{"n_group": 3}, nil, ErrInvalidConfig},
		{"more kept groups than groups", obj{"topk_group": 5}, nil, ErrInvalidConfig},
		{"odd rope dims", obj{"qk_rope_head_dim": 7}, nil, ErrInvalidConfig},
		{"more per token than experts", obj{"num_experts_per_tok": 9}, nil, ErrInvalidConfig},
	}
	runConfigCases(t, deepseekJSON, tests)
}

// glmJSON is a GLM-4.5-Air-shaped config with the given keys replaced
// (nil deletes).
func glmJSON(t *testing.T, edits map[string]any) []byte {
	t.Helper()
	base := obj{
		"architectures": []string{"Glm4MoeForCausalLM"}, "model_type": "glm4_moe", "head_dim": 32, "attention_bias": true,
		"partial_rotary_factor": 0.5, "use_qk_norm": false, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
		"moe_intermediate_size": 32, "routed_scaling_factor": 1.0, "norm_topk_prob": true, "n_group": 1, "topk_group": 1,
		"first_k_dense_replace": 1, "tie_word_embeddings": false,
		"rope_scaling": obj{"rope_type": "linear", "factor": 2.0},
	}
	return cfgJSON(t, withEdits(base, edits))
}

func TestParseGlm4MoE(t *testing.T) {
	tests := []configCase{
		{"glm-4.5-air's keys; rope_scaling dropped as mlx-lm does", nil, func(t *testing.T, c *Config) {
			moe := &MoE{Experts: 8, TopK: 2, Intermediate: 32, SparseStep: 1, NormTopK: true}
			rt := &Router{Groups: 1, TopKGroups: 1, ScalingFactor: 1, SharedExperts: 1, FirstDense: 1, LayerFreq: 1}
			if c.Architecture != ArchGlm4MoE || !reflect.DeepEqual(c.MoE, moe) || !reflect.DeepEqual(c.Router, rt) || c.RotaryDims() != 16 ||
				c.RopeScaling != nil || c.QKNorm || !c.AttentionBias || c.TieWordEmbeddings || c.MLA != nil {
				t.Errorf("got %+v %+v rotary %d rope %+v qk norm %v", c.MoE, c.Router, c.RotaryDims(), c.RopeScaling, c.QKNorm)
			}
			if h, d := c.KVDims(); h != 2 || d != 32 {
				t.Errorf("KV dims %d × %d", h, d)
			}
		}, nil},
		{"use_qk_norm", obj{"use_qk_norm": true}, func(t *testing.T, c *Config) {
			if !c.QKNorm {
				t.Error("no q/k norms")
			}
		}, nil},
		{"no head_dim", obj{"head_dim": nil}, nil, ErrInvalidConfig},
		{"no n_routed_experts", obj{"n_routed_experts": nil}, nil, ErrInvalidConfig},
		{"odd rotary features", obj{"partial_rotary_factor": 0.3}, nil, ErrInvalidConfig},
		{"tied", obj{"tie_word_embeddings": true}, nil, ErrUnsupported},
		{"another topk_method", obj{"topk_method": "greedy"}, nil, ErrUnsupported},
	}
	runConfigCases(t, glmJSON, tests)
}

// configCase is a config made by editing a family's base config, and
// what parsing it must give: check on the config, or err.
type configCase struct {
	name  string
	edits map[string]any
	check func(t *testing.T, c *Config)
	err   error
}

func runConfigCases(t *testing.T, base func(*testing.T, map[string]any) []byte, tests []configCase) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(base(t, tc.edits))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// withEdits sets edits' keys in base and returns it.
func withEdits(base, edits map[string]any) map[string]any {
	for k, v := range edits {
		base[k] = v
	}
	return base
}
