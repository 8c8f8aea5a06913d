package modelfile

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// cfgJSON returns a valid Qwen3-style config with the given keys replaced
// (a nil value deletes the key).
func cfgJSON(t testing.TB, edits map[string]any) []byte {
	t.Helper()
	base := map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"hidden_size":             64,
		"intermediate_size":       128,
		"num_hidden_layers":       2,
		"num_attention_heads":     4,
		"num_key_value_heads":     2,
		"head_dim":                32,
		"rms_norm_eps":            1e-6,
		"rope_theta":              1000000,
		"rope_scaling":            nil,
		"max_position_embeddings": 40960,
		"tie_word_embeddings":     true,
		"vocab_size":              1024,
		"bos_token_id":            1000,
		"eos_token_id":            1001,
		"torch_dtype":             "bfloat16",
	}
	for k, v := range edits {
		if v == nil {
			delete(base, k)
		} else {
			base[k] = v
		}
	}
	b, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type obj = map[string]any

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name  string
		edits map[string]any
		check func(t *testing.T, c *Config)
	}{
		{"qwen3 head_dim differs from hidden/heads", nil, func(t *testing.T, c *Config) {
			want := Config{Architecture: ArchQwen3, Architectures: []string{"Qwen3ForCausalLM"}, ModelType: "qwen3",
				HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32,
				VocabSize: 1024, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1, TieWordEmbeddings: true,
				BOSTokenIDs: TokenIDs{1000}, EOSTokenIDs: TokenIDs{1001}, TorchDType: "bfloat16"}
			if !reflect.DeepEqual(*c, want) {
				t.Errorf("got  %+v\nwant %+v", *c, want)
			}
		}},
		{"llama defaults", obj{"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "head_dim": nil, "num_key_value_heads": nil,
			"rope_theta": nil, "rms_norm_eps": nil, "max_position_embeddings": nil, "tie_word_embeddings": nil, "eos_token_id": []int{1001, 1002}, "torch_dtype": nil},
			func(t *testing.T, c *Config) {
				if c.Architecture != ArchLlama || c.HeadDim != 16 || c.NumKeyValueHeads != 4 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 ||
					c.MaxPositionEmbeddings != 2048 || !c.TieWordEmbeddings || !reflect.DeepEqual(c.EOSTokenIDs, TokenIDs{1001, 1002}) || c.TorchDType != "" {
					t.Errorf("defaults not applied: %+v", c)
				}
			}},
		{"qwen2 defaults", obj{"architectures": []string{"Qwen2ForCausalLM"}, "rope_theta": nil, "head_dim": nil, "tie_word_embeddings": nil},
			func(t *testing.T, c *Config) {
				if c.Architecture != ArchQwen2 || c.RopeTheta != 1e6 || c.HeadDim != 16 || !c.TieWordEmbeddings {
					t.Errorf("qwen2 defaults: %+v", c)
				}
			}},
		{"qwen3 untied by default", obj{"tie_word_embeddings": nil}, func(t *testing.T, c *Config) {
			if c.TieWordEmbeddings {
				t.Error("qwen3 tied without tie_word_embeddings")
			}
		}},
		{"model_type when architectures missing", obj{"architectures": nil, "model_type": "llama"}, func(t *testing.T, c *Config) {
			if c.Architecture != ArchLlama {
				t.Errorf("architecture %q", c.Architecture)
			}
		}},
		{"second architecture entry", obj{"architectures": []string{"Foo", "LlamaForCausalLM"}}, func(t *testing.T, c *Config) {
			if c.Architecture != ArchLlama {
				t.Errorf("architecture %q", c.Architecture)
			}
		}},
		{"eos null, dtype key, torch prefix", obj{"eos_token_id": nil, "bos_token_id": nil, "torch_dtype": nil, "dtype": "torch.float16"}, func(t *testing.T, c *Config) {
			if c.EOSTokenIDs != nil || c.BOSTokenIDs != nil || c.TorchDType != "float16" {
				t.Errorf("got eos %v bos %v dtype %q", c.EOSTokenIDs, c.BOSTokenIDs, c.TorchDType)
			}
		}},
		{"rope llama3 via rope_type", obj{"rope_theta": 500000, "rope_scaling": obj{"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
			func(t *testing.T, c *Config) {
				want := &RopeScaling{Type: RopeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
				if !reflect.DeepEqual(c.RopeScaling, want) || c.RopeTheta != 500000 {
					t.Errorf("got %+v theta %v", c.RopeScaling, c.RopeTheta)
				}
			}},
		{"rope llama3 via type, defaults", obj{"rope_scaling": obj{"type": "llama3", "factor": 8}}, func(t *testing.T, c *Config) {
			want := &RopeScaling{Type: RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}
			if !reflect.DeepEqual(c.RopeScaling, want) {
				t.Errorf("got %+v", c.RopeScaling)
			}
		}},
		{"rope yarn qwen3 long context", obj{"rope_scaling": obj{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
			func(t *testing.T, c *Config) {
				want := &RopeScaling{Type: RopeYarn, Factor: 4, OriginalMaxPositionEmbeddings: 32768, BetaFast: 32, BetaSlow: 1, Mscale: 1}
				if !reflect.DeepEqual(c.RopeScaling, want) {
					t.Errorf("got %+v", c.RopeScaling)
				}
			}},
		{"rope yarn all fields, both spellings agree", obj{"rope_scaling": obj{"type": "yarn", "rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
			"beta_fast": 16, "beta_slow": 2, "mscale": 0.707, "mscale_all_dim": 0.707, "attention_factor": 1.2}},
			func(t *testing.T, c *Config) {
				want := &RopeScaling{Type: RopeYarn, Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 16, BetaSlow: 2, Mscale: 0.707, MscaleAllDim: 0.707, AttentionFactor: 1.2}
				if !reflect.DeepEqual(c.RopeScaling, want) {
					t.Errorf("got %+v", c.RopeScaling)
				}
			}},
		{"rope default type is no scaling", obj{"rope_scaling": obj{"rope_type": "default"}}, func(t *testing.T, c *Config) {
			if c.RopeScaling != nil {
				t.Errorf("got %+v", c.RopeScaling)
			}
		}},
		{"rope linear", obj{"rope_scaling": obj{"type": "linear", "factor": 2}}, func(t *testing.T, c *Config) {
			if c.RopeScaling == nil || c.RopeScaling.Type != RopeLinear || c.RopeScaling.Factor != 2 {
				t.Errorf("got %+v", c.RopeScaling)
			}
		}},
		{"transformers v5 rope_parameters", obj{"rope_theta": nil, "rope_scaling": nil, "rope_parameters": obj{"rope_type": "llama3", "rope_theta": 500000, "factor": 32}},
			func(t *testing.T, c *Config) {
				if c.RopeTheta != 500000 || c.RopeScaling == nil || c.RopeScaling.Type != RopeLlama3 || c.RopeScaling.Factor != 32 {
					t.Errorf("got theta %v scaling %+v", c.RopeTheta, c.RopeScaling)
				}
			}},
		{"quantization with overrides", obj{"quantization": obj{"group_size": 64, "bits": 4, "mode": "affine",
			"model.layers.0.mlp.down_proj": obj{"group_size": 32, "bits": 6}, "lm_head": false, "model.embed_tokens": true, "model.layers.1.mlp.up_proj": obj{"bits": 8}}},
			func(t *testing.T, c *Config) {
				q := c.Quantization
				want := &Quantization{QuantParams: QuantParams{64, 4, ModeAffine}, Overrides: map[string]*QuantParams{
					"model.layers.0.mlp.down_proj": {32, 6, ModeAffine},
					"lm_head":                      nil,
					"model.embed_tokens":           {64, 4, ModeAffine},
					"model.layers.1.mlp.up_proj":   {64, 8, ModeAffine},
				}}
				if !reflect.DeepEqual(q, want) {
					t.Errorf("got %+v", q)
				}
			}},
		// mlx_lm.convert --q-mode mxfp4 of a MoE: the routers' 8 bits
		// with no mode are affine, not mxfp4; a mode alone takes its
		// defaults.
		{"mxfp4 with affine router overrides", obj{"quantization": obj{"group_size": 32, "bits": 4, "mode": "mxfp4",
			"model.layers.0.mlp.gate": obj{"group_size": 64, "bits": 8}, "model.layers.0.mlp.shared_expert_gate": obj{"bits": 8},
			"lm_head": obj{"mode": "mxfp8"}}},
			func(t *testing.T, c *Config) {
				want := &Quantization{QuantParams: QuantParams{32, 4, ModeMXFP4}, Overrides: map[string]*QuantParams{
					"model.layers.0.mlp.gate":               {64, 8, ModeAffine},
					"model.layers.0.mlp.shared_expert_gate": {64, 8, ModeAffine},
					"lm_head":                               {32, 8, ModeMXFP8},
				}}
				if q := c.Quantization; !reflect.DeepEqual(q, want) {
					t.Errorf("got %+v", q)
				}
			}},
		{"quantization_config alone, no mode", obj{"quantization_config": obj{"group_size": 128, "bits": 3}}, func(t *testing.T, c *Config) {
			if q := c.Quantization; q == nil || q.QuantParams != (QuantParams{128, 3, ModeAffine}) || q.Overrides != nil {
				t.Errorf("got %+v", q)
			}
		}},
		{"quantization wins over quantization_config", obj{"quantization": obj{"group_size": 32, "bits": 8}, "quantization_config": obj{"quant_method": "awq"}}, func(t *testing.T, c *Config) {
			if q := c.Quantization; q == nil || q.QuantParams != (QuantParams{32, 8, ModeAffine}) {
				t.Errorf("got %+v", q)
			}
		}},
		{"not quantized", obj{"quantization": nil}, func(t *testing.T, c *Config) {
			if c.Quantization != nil {
				t.Errorf("got %+v", c.Quantization)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(cfgJSON(t, tc.edits))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		edits map[string]any
		want  error
		msg   string
	}{
		{"unknown architecture", obj{"architectures": []string{"FalconForCausalLM"}}, ErrUnknownArchitecture, "FalconForCausalLM"},
		{"no architecture at all", obj{"architectures": nil, "model_type": nil}, ErrUnknownArchitecture, ""},
		{"missing hidden_size", obj{"hidden_size": nil}, ErrInvalidConfig, "missing hidden_size"},
		{"zero layers", obj{"num_hidden_layers": 0}, ErrInvalidConfig, "num_hidden_layers 0 out of range"},
		{"negative heads", obj{"num_attention_heads": -4}, ErrInvalidConfig, "num_attention_heads -4"},
		{"absurd vocab", obj{"vocab_size": 1 << 40}, ErrInvalidConfig, "vocab_size"},
		{"absurd hidden", obj{"hidden_size": 1 << 20}, ErrInvalidConfig, "hidden_size"},
		{"fractional size", obj{"hidden_size": 64.5}, ErrInvalidConfig, "hidden_size"},
		{"string size", obj{"intermediate_size": "128"}, ErrInvalidConfig, "intermediate_size"},
		{"heads do not divide hidden", obj{"head_dim": nil, "num_attention_heads": 3, "num_key_value_heads": 1}, ErrInvalidConfig, "does not divide hidden_size"},
		{"kv heads do not divide heads", obj{"num_key_value_heads": 3}, ErrInvalidConfig, "num_key_value_heads 3 does not divide num_attention_heads 4"},
		{"zero kv heads", obj{"num_key_value_heads": 0}, ErrInvalidConfig, "num_key_value_heads 0"},
		{"odd head_dim", obj{"head_dim": 33}, ErrInvalidConfig, "odd"},
		{"zero eps", obj{"rms_norm_eps": 0}, ErrInvalidConfig, "rms_norm_eps"},
		{"negative rope_theta", obj{"rope_theta": -1}, ErrInvalidConfig, "rope_theta"},
		{"eos beyond vocab", obj{"eos_token_id": []int{1001, 5000}}, ErrInvalidConfig, "eos_token_id 5000"},
		{"negative bos", obj{"bos_token_id": -1}, ErrInvalidConfig, "bos_token_id -1"},
		{"eos not an int", obj{"eos_token_id": "x"}, ErrInvalidConfig, ""},
		{"bad dtype", obj{"torch_dtype": "int8"}, ErrInvalidConfig, "torch_dtype"},
		{"rope type unsupported", obj{"rope_scaling": obj{"rope_type": "mrope", "factor": 2}}, ErrUnsupported, "mrope"},
		{"rope type and rope_type disagree", obj{"rope_scaling": obj{"type": "linear", "rope_type": "yarn", "factor": 2}}, ErrInvalidConfig, "disagree"},
		{"rope without factor", obj{"rope_scaling": obj{"rope_type": "llama3"}}, ErrInvalidConfig, "needs a factor"},
		{"rope zero factor", obj{"rope_scaling": obj{"rope_type": "yarn", "factor": 0}}, ErrInvalidConfig, "factor 0"},
		{"llama3 high below low", obj{"rope_scaling": obj{"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1}}, ErrInvalidConfig, "low_freq_factor"},
		{"yarn negative beta", obj{"rope_scaling": obj{"rope_type": "yarn", "factor": 4, "beta_fast": -1}}, ErrInvalidConfig, "beta_fast"},
		{"yarn bad original", obj{"rope_scaling": obj{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0}}, ErrInvalidConfig, "original_max_position_embeddings"},
		{"quant bits 7", obj{"quantization": obj{"group_size": 64, "bits": 7}}, ErrInvalidConfig, "7 bits"},
		{"quant group 48", obj{"quantization": obj{"group_size": 48, "bits": 4}}, ErrInvalidConfig, "group size 48"},
		{"quant missing bits", obj{"quantization": obj{"group_size": 64}}, ErrInvalidConfig, "missing bits"},
		{"nvfp4 global_scale", obj{"quantization": obj{"group_size": 16, "bits": 4, "mode": "nvfp4",
			"model.layers.0.mlp.switch_mlp.up_proj": obj{"group_size": 16, "bits": 4, "mode": "nvfp4", "global_scale": true}}}, ErrUnsupported, "global_scale"},
		{"quant mode unknown", obj{"quantization": obj{"group_size": 32, "bits": 4, "mode": "mxint4"}}, ErrUnsupported, "mxint4"},
		{"mxfp4 in groups of 64", obj{"quantization": obj{"group_size": 64, "bits": 4, "mode": "mxfp4"}}, ErrInvalidConfig, "mxfp4 quantization with group size 64"},
		{"nvfp4 at 8 bits", obj{"quantization": obj{"group_size": 16, "bits": 8, "mode": "nvfp4"}}, ErrInvalidConfig, "want 16 and 4"},
		{"override mode unknown", obj{"quantization": obj{"group_size": 32, "bits": 4, "mode": "mxfp4", "lm_head": obj{"mode": "int4"}}}, ErrUnsupported, "lm_head"},
		{"quant method awq", obj{"quantization_config": obj{"quant_method": "awq", "bits": 4, "group_size": 128}}, ErrUnsupported, "awq"},
		{"override bits 7", obj{"quantization": obj{"group_size": 64, "bits": 4, "model.layers.0.mlp.down_proj": obj{"bits": 7}}}, ErrInvalidConfig, "model.layers.0.mlp.down_proj"},
		{"override not an object", obj{"quantization": obj{"group_size": 64, "bits": 4, "lm_head": obj{"bits": "x"}}}, ErrInvalidConfig, "lm_head"},
		{"quantization not an object", obj{"quantization": []int{4}}, ErrInvalidConfig, "quantization"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(cfgJSON(t, tc.edits))
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
	if _, err := ParseConfig([]byte(`{"hidden_size":`)); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("truncated JSON: %v", err)
	}
}

func TestQuantizationFor(t *testing.T) {
	c, err := ParseConfig(cfgJSON(t, obj{"quantization": obj{"group_size": 64, "bits": 4,
		"model.layers.0.mlp.down_proj": obj{"group_size": 32, "bits": 6}, "lm_head": false}}))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Quantization
	tests := []struct {
		path      string
		hasScales bool
		want      QuantParams
		quantized bool
	}{
		{"model.layers.0.mlp.down_proj", true, QuantParams{32, 6, ModeAffine}, true},
		{"model.layers.0.mlp.down_proj", false, QuantParams{32, 6, ModeAffine}, true}, // the override decides
		{"model.layers.1.mlp.down_proj", true, QuantParams{64, 4, ModeAffine}, true},
		{"model.layers.1.mlp.down_proj", false, QuantParams{}, false},
		{"lm_head", true, QuantParams{}, false},
	}
	for _, tc := range tests {
		got, ok := q.For(tc.path, tc.hasScales)
		if got != tc.want || ok != tc.quantized {
			t.Errorf("For(%q, %v) = %+v, %v; want %+v, %v", tc.path, tc.hasScales, got, ok, tc.want, tc.quantized)
		}
	}
	var none *Quantization
	if _, ok := none.For("x", true); ok {
		t.Error("nil quantization quantizes")
	}
	if got := q.OverridePaths(); !reflect.DeepEqual(got, []string{"lm_head", "model.layers.0.mlp.down_proj"}) {
		t.Errorf("OverridePaths = %v", got)
	}
}

func TestParseGenerationConfig(t *testing.T) {
	g, err := ParseGenerationConfig([]byte(`{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
		"pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.EOSTokenIDs, TokenIDs{151645, 151643}) || !reflect.DeepEqual(g.BOSTokenIDs, TokenIDs{151643}) ||
		*g.Temperature != 0.6 || *g.TopK != 20 || *g.TopP != 0.95 || !*g.DoSample || g.MinP != nil {
		t.Errorf("got %+v", g)
	}
	g, err = ParseGenerationConfig([]byte(`{"eos_token_id": 2}`))
	if err != nil || !reflect.DeepEqual(g.EOSTokenIDs, TokenIDs{2}) {
		t.Errorf("single eos: %+v, %v", g, err)
	}
	for _, bad := range []string{`{"temperature": -1}`, `{"top_p": 0}`, `{"top_p": 1.5}`, `{"top_k": -1}`, `{"min_p": 2}`,
		`{"repetition_penalty": 0}`, `{"eos_token_id": [-3]}`, `{"max_new_tokens": -1}`, `[]`} {
		if _, err := ParseGenerationConfig([]byte(bad)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: error = %v", bad, err)
		}
	}
}
