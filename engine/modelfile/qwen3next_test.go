package modelfile

import (
	"encoding/json"
	"testing"
)

// nextJSON is a Qwen3-Next-shaped config with the given keys replaced
// (nil deletes).
func nextJSON(t *testing.T, edits map[string]any) []byte {
	t.Helper()
	base := obj{
		"architectures": []string{"Qwen3NextForCausalLM"}, "model_type": "qwen3_next", "head_dim": 32,
		"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
		"linear_conv_kernel_dim": 4, "full_attention_interval": 4, "partial_rotary_factor": 0.25,
		"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1,
		"shared_expert_intermediate_size": 32, "norm_topk_prob": true, "tie_word_embeddings": nil,
	}
	return cfgJSON(t, withEdits(base, edits))
}

func TestParseQwen3Next(t *testing.T) {
	tests := []configCase{
		{"qwen3-next's keys", nil, func(t *testing.T, c *Config) {
			d := c.DeltaNet
			want := DeltaNet{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8, ConvKernel: 4, FullAttentionInterval: 4, SharedExpert: 32}
			if c.Architecture != ArchQwen3Next || d == nil || *d != want || c.TieWordEmbeddings || c.RotaryDims() != 8 || c.MoE == nil {
				t.Fatalf("got %+v %+v tied %v rotary %d", c, d, c.TieWordEmbeddings, c.RotaryDims())
			}
			if !d.Linear(0) || !d.Linear(2) || d.Linear(3) || d.ConvDim() != 2*2*16+4*8 || d.StateFloats() != 4*8*16+3*(2*2*16+4*8) {
				t.Errorf("layers / sizes: conv %d state %d", d.ConvDim(), d.StateFloats())
			}
		}, nil},
		{"no full_attention_interval: 4", obj{"full_attention_interval": nil}, func(t *testing.T, c *Config) {
			if c.DeltaNet.FullAttentionInterval != 4 {
				t.Errorf("interval %d", c.DeltaNet.FullAttentionInterval)
			}
		}, nil},
		{"no linear_num_key_heads", obj{"linear_num_key_heads": nil}, nil, ErrInvalidConfig},
		{"key heads do not divide value heads", obj{"linear_num_key_heads": 3}, nil, ErrInvalidConfig},
		{"kernel 1", obj{"linear_conv_kernel_dim": 1}, nil, ErrInvalidConfig},
		{"no shared expert", obj{"shared_expert_intermediate_size": nil}, nil, ErrInvalidConfig},
		{"no partial_rotary_factor", obj{"partial_rotary_factor": nil}, nil, ErrInvalidConfig},
	}
	runConfigCases(t, nextJSON, tests)
}

// TestParseQwen35 reads Qwen3.5 configs as mlx-lm does: the text model in
// text_config (or at the top level), quantization from the top, RoPE
// from rope_parameters, a mixture in every layer for qwen3_5_moe, and
// the weights under language_model.
func TestParseQwen35(t *testing.T) {
	text := obj{
		"model_type": "qwen3_5_moe_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1024, "rms_norm_eps": 1e-6,
		"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
		"linear_conv_kernel_dim": 4, "full_attention_interval": 4,
		"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
		"rope_parameters": obj{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5, "mrope_section": []int{11, 11, 10}},
	}
	quant := obj{"group_size": 64, "bits": 4}
	nested, _ := json.Marshal(obj{"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
		"text_config": text, "quantization": quant})
	c, err := ParseConfig(nested)
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != ArchQwen35MoE || c.WeightPrefix != "language_model." || !c.DeltaNet.Unfused || c.RopeTheta != 1e7 ||
		c.RotaryDims() != 16 || c.Quantization == nil || c.TieWordEmbeddings || !c.MoE.Sparse(0) || !c.MoE.Sparse(3) || !c.MoE.NormTopK {
		t.Errorf("nested: %+v moe %+v", c, c.MoE)
	}
	dense := withEdits(text, obj{"model_type": "qwen3_5", "num_experts": nil, "num_experts_per_tok": nil,
		"moe_intermediate_size": nil, "shared_expert_intermediate_size": nil, "rope_parameters": nil})
	flat, _ := json.Marshal(dense)
	if c, err = ParseConfig(flat); err != nil {
		t.Fatal(err)
	}
	if c.Architecture != ArchQwen35 || c.WeightPrefix != "language_model." || c.MoE != nil || c.RopeTheta != 100000 || c.RotaryDims() != 8 {
		t.Errorf("flat dense: %+v", c)
	}
}
