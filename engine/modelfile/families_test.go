package modelfile

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// phi3JSON is a Phi-4-mini-shaped config (hidden 64, 4 heads of 16, RoPE
// on 12 of them) with the given keys replaced (nil deletes).
func phi3JSON(t *testing.T, edits map[string]any) []byte {
	t.Helper()
	base := obj{
		"architectures": []string{"Phi3ForCausalLM"}, "model_type": "phi3", "head_dim": nil,
		"partial_rotary_factor": 0.75, "original_max_position_embeddings": 4096, "max_position_embeddings": 131072,
		"rope_theta": 10000.0, "rope_scaling": obj{"type": "longrope",
			"long_factor": []float64{1, 2, 3, 4, 5, 6}, "short_factor": []float64{1, 1, 1, 1, 1, 1}},
	}
	for k, v := range edits {
		base[k] = v
	}
	return cfgJSON(t, base)
}

func TestParsePhi3(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		check func(t *testing.T, c *Config)
	}{
		{"phi-4-mini: partial rotary, longrope", phi3JSON(t, nil), func(t *testing.T, c *Config) {
			want := &RopeScaling{Type: RopeLongRope, OriginalMaxPositionEmbeddings: 4096,
				LongFactor: []float64{1, 2, 3, 4, 5, 6}, ShortFactor: []float64{1, 1, 1, 1, 1, 1}}
			if c.Architecture != ArchPhi3 || c.HeadDim != 16 || c.PartialRotaryFactor != 0.75 || c.RotaryDims() != 12 || !reflect.DeepEqual(c.RopeScaling, want) {
				t.Errorf("got arch %q head %d partial %v rotary %d rope %+v", c.Architecture, c.HeadDim, c.PartialRotaryFactor, c.RotaryDims(), c.RopeScaling)
			}
		}},
		{"head_dim ignored, su spelling, original max default", phi3JSON(t, obj{"head_dim": 32, "partial_rotary_factor": nil, "original_max_position_embeddings": nil,
			"rope_scaling": obj{"type": "su", "long_factor": ones(8), "short_factor": ones(8)}}), func(t *testing.T, c *Config) {
			if c.HeadDim != 16 || c.RotaryDims() != 16 || c.RopeScaling.Type != RopeLongRope || c.RopeScaling.OriginalMaxPositionEmbeddings != 4096 {
				t.Errorf("got head %d rotary %d rope %+v", c.HeadDim, c.RotaryDims(), c.RopeScaling)
			}
		}},
		{"yarn dropped as mlx-lm does", phi3JSON(t, obj{"rope_scaling": obj{"type": "yarn", "factor": 4.0}}), func(t *testing.T, c *Config) {
			if c.RopeScaling != nil {
				t.Errorf("rope scaling %+v, want none", c.RopeScaling)
			}
		}},
		{"no max_position_embeddings: 131072", phi3JSON(t, obj{"max_position_embeddings": nil}), func(t *testing.T, c *Config) {
			if c.MaxPositionEmbeddings != 131072 {
				t.Errorf("max positions %d", c.MaxPositionEmbeddings)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func ones(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func TestParseFamilyErrors(t *testing.T) {
	llama := func(edits obj) []byte {
		edits["architectures"], edits["model_type"] = []string{"LlamaForCausalLM"}, "llama"
		return cfgJSON(t, edits)
	}
	tests := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"longrope without short factors", phi3JSON(t, obj{"rope_scaling": obj{"type": "longrope", "long_factor": ones(6)}}), ErrInvalidConfig, "short_factor"},
		{"longrope lists differ", phi3JSON(t, obj{"rope_scaling": obj{"type": "longrope", "long_factor": ones(6), "short_factor": ones(5)}}), ErrInvalidConfig, "6 long and 5 short"},
		{"longrope factor count", phi3JSON(t, obj{"rope_scaling": obj{"type": "longrope", "long_factor": ones(8), "short_factor": ones(8)}}), ErrInvalidConfig, "8 longrope factors for 12"},
		{"longrope zero factor", phi3JSON(t, obj{"rope_scaling": obj{"type": "longrope", "long_factor": make([]float64, 6), "short_factor": ones(6)}}), ErrInvalidConfig, "positive"},
		{"longrope absurd list", phi3JSON(t, obj{"rope_scaling": obj{"type": "longrope", "long_factor": ones(1000), "short_factor": ones(1000)}}), ErrInvalidConfig, "at most"},
		{"partial rotary zero", phi3JSON(t, obj{"partial_rotary_factor": 0}), ErrInvalidConfig, "partial_rotary_factor"},
		{"partial rotary above 1", phi3JSON(t, obj{"partial_rotary_factor": 1.5}), ErrInvalidConfig, "partial_rotary_factor"},
		{"partial rotary odd", phi3JSON(t, obj{"partial_rotary_factor": 0.2, "rope_scaling": nil}), ErrInvalidConfig, "rotates 3 of 16"},
		{"phi3 original max zero", phi3JSON(t, obj{"original_max_position_embeddings": 0}), ErrInvalidConfig, "original_max_position_embeddings"},
		{"llama longrope without original max", llama(obj{"rope_scaling": obj{"rope_type": "longrope", "long_factor": ones(16), "short_factor": ones(16)}}), ErrInvalidConfig, "original_max_position_embeddings"},
		{"sliding layers without a window", llama(obj{"layer_types": []string{"sliding_attention", "full_attention"}}), ErrInvalidConfig, "sliding_window"},
		{"layer_types count", llama(obj{"layer_types": []string{"full_attention"}, "sliding_window": 8}), ErrInvalidConfig, "1 layer_types for 2 layers"},
		{"layer_types unknown", llama(obj{"layer_types": []string{"full_attention", "chunked_attention"}, "sliding_window": 8}), ErrInvalidConfig, "chunked_attention"},
		{"mistral3 without text_config", []byte(`{"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"]}`), ErrInvalidConfig, "text_config"},
		{"mistral3 text_config not an object", []byte(`{"model_type": "mistral3", "text_config": [1]}`), ErrInvalidConfig, "text_config"},
		{"mistral3 with mistral4", mistral3JSON(t, obj{"model_type": "mistral4"}, nil), ErrUnsupported, "mistral4"},
		{"ministral3 without rope_parameters", mistral3JSON(t, obj{"model_type": "ministral3"}, nil), ErrInvalidConfig, "rope_parameters"},
		{"ministral3 without the query scale", mistral3JSON(t, ministral3Text(obj{"llama_4_scaling_beta": nil}), nil), ErrInvalidConfig, "llama_4_scaling_beta"},
		{"ministral3 without rope_theta", mistral3JSON(t, ministral3Text(obj{"rope_theta": nil}), nil), ErrInvalidConfig, "rope_theta"},
		{"ministral3 negative beta", mistral3JSON(t, ministral3Text(obj{"llama_4_scaling_beta": -1}), nil), ErrInvalidConfig, "llama_4_scaling_beta"},
		{"ministral3 zero original max", mistral3JSON(t, ministral3Text(obj{"original_max_position_embeddings": 0}), nil), ErrInvalidConfig, "original_max_position_embeddings"},
		{"ministral3 unknown rope type", mistral3JSON(t, ministral3Text(obj{"rope_type": "dynamic2", "type": nil}), nil), ErrUnsupported, "dynamic2"},
		{"mistral3 bad text model", mistral3JSON(t, obj{"hidden_size": 0}, nil), ErrInvalidConfig, "text_config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

// mistral3JSON is a Mistral Small 3.1-shaped config: a mistral text
// config (edited by text) inside, quantization and dtype at the top
// (edited by top).
func mistral3JSON(t *testing.T, text, top obj) []byte {
	t.Helper()
	tc := obj{"model_type": "mistral", "head_dim": 32, "tie_word_embeddings": nil, "torch_dtype": nil, "architectures": nil,
		"layer_types": []string{"sliding_attention", "full_attention"}, "sliding_window": 16}
	for k, v := range text {
		tc[k] = v
	}
	var textCfg map[string]any
	if err := json.Unmarshal(cfgJSON(t, tc), &textCfg); err != nil {
		t.Fatal(err)
	}
	base := map[string]any{
		"architectures": []string{"Mistral3ForConditionalGeneration"}, "model_type": "mistral3", "torch_dtype": "bfloat16",
		"text_config": textCfg, "vision_config": obj{"model_type": "pixtral", "hidden_size": 16},
		"quantization": obj{"group_size": 64, "bits": 4, "language_model.lm_head": obj{"group_size": 64, "bits": 8}},
	}
	for k, v := range top {
		base[k] = v
	}
	b, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseMistral(t *testing.T) {
	t.Run("mistral", func(t *testing.T) {
		c, err := ParseConfig(cfgJSON(t, obj{"architectures": []string{"MistralForCausalLM"}, "model_type": "mistral", "head_dim": 32,
			"sliding_window": 4096, "tie_word_embeddings": false}))
		if err != nil {
			t.Fatal(err)
		}
		// A sliding_window without layer_types slides nothing (mlx-lm's llama).
		if c.Architecture != ArchMistral || c.HeadDim != 32 || c.Sliding != nil || c.SlidingWindow != 0 || c.TieWordEmbeddings {
			t.Errorf("got %+v", c)
		}
	})
	t.Run("mistral3", func(t *testing.T) {
		c, err := ParseConfig(mistral3JSON(t, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		if c.Architecture != ArchMistral3 || c.ModelType != "mistral3" || !reflect.DeepEqual(c.Architectures, []string{"Mistral3ForConditionalGeneration"}) ||
			c.WeightPrefix != "language_model." || c.TieWordEmbeddings || c.TorchDType != "bfloat16" || c.HeadDim != 32 {
			t.Errorf("got %+v", c)
		}
		if !reflect.DeepEqual(c.Sliding, []bool{true, false}) || c.SlidingWindow != 16 {
			t.Errorf("sliding %v window %d", c.Sliding, c.SlidingWindow)
		}
		q := c.Quantization
		if q == nil || q.Bits != 4 {
			t.Fatalf("quantization %+v", q)
		}
		if p, ok := q.For("language_model.lm_head", true); !ok || p.Bits != 8 {
			t.Errorf("lm_head override: %+v %v", p, ok)
		}
	})
	t.Run("mistral3 tied when it says so", func(t *testing.T) {
		c, err := ParseConfig(mistral3JSON(t, obj{"tie_word_embeddings": true, "model_type": nil}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if !c.TieWordEmbeddings || c.Architecture != ArchMistral3 {
			t.Errorf("got %+v", c)
		}
	})
}

// ministral3Text is the text_config edits of a Ministral 3 config: its
// rope_parameters (3B's, yarn ×16 over 16384 positions, β 0.1) with the
// given keys replaced (nil deletes).
func ministral3Text(rope obj) obj {
	rp := obj{"beta_fast": 32.0, "beta_slow": 1.0, "factor": 16.0, "llama_4_scaling_beta": 0.1, "mscale": 1.0, "mscale_all_dim": 1.0,
		"original_max_position_embeddings": 16384, "rope_theta": 1000000.0, "rope_type": "yarn", "type": "yarn"}
	for k, v := range rope {
		if v == nil {
			delete(rp, k)
		} else {
			rp[k] = v
		}
	}
	return obj{"model_type": "ministral3", "rope_parameters": rp, "rope_theta": nil, "tie_word_embeddings": true}
}

func TestParseMinistral3(t *testing.T) {
	c, err := ParseConfig(mistral3JSON(t, ministral3Text(nil), nil))
	if err != nil {
		t.Fatal(err)
	}
	wantRope := &RopeScaling{Type: RopeYarn, Factor: 16, OriginalMaxPositionEmbeddings: 16384, BetaFast: 32, BetaSlow: 1, Mscale: 1, MscaleAllDim: 1}
	if c.Architecture != ArchMinistral3 || c.ModelType != "mistral3" || c.WeightPrefix != "language_model." || !c.TieWordEmbeddings ||
		c.RopeTheta != 1e6 || !reflect.DeepEqual(c.RopeScaling, wantRope) || !reflect.DeepEqual(c.QueryScale, &QueryScale{Beta: 0.1, Every: 16384}) {
		t.Errorf("got %+v, rope %+v, query scale %+v", c, c.RopeScaling, c.QueryScale)
	}
	if !reflect.DeepEqual(c.Sliding, []bool{true, false}) || c.SlidingWindow != 16 {
		t.Errorf("sliding %v window %d", c.Sliding, c.SlidingWindow)
	}
	// The factor: 1 below the first step, then 1 + β·ln(1 + ⌊p/n⌋).
	for _, tc := range []struct {
		p    int
		want float64
	}{{0, 1}, {16383, 1}, {16384, 1 + 0.1*math.Log(2)}, {3*16384 + 5, 1 + 0.1*math.Log(4)}, {262143, 1 + 0.1*math.Log(16)}} {
		if got := c.QueryScale.At(tc.p); math.Abs(float64(got)-tc.want) > 1e-7 {
			t.Errorf("At(%d) = %v, want %v", tc.p, got, tc.want)
		}
	}
	// A text-only checkpoint (model_type ministral3 at the top): tied by
	// default, no weight prefix.
	text := ministral3Text(nil)
	text["architectures"] = []string{"Ministral3ForCausalLM"}
	text["tie_word_embeddings"] = nil
	c, err = ParseConfig(cfgJSON(t, text))
	if err != nil {
		t.Fatal(err)
	}
	if c.Architecture != ArchMinistral3 || c.WeightPrefix != "" || !c.TieWordEmbeddings || c.QueryScale == nil || c.QueryScale.Every != 16384 {
		t.Errorf("text-only: got %+v", c)
	}
}

func TestParseGptOss(t *testing.T) {
	oss := func(edits obj) []byte {
		base := obj{"architectures": []string{"GptOssForCausalLM"}, "model_type": "gpt_oss", "head_dim": nil, "rope_theta": nil,
			"tie_word_embeddings": false, "num_local_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 4}
		for k, v := range edits {
			base[k] = v
		}
		return cfgJSON(t, base)
	}
	c, err := ParseConfig(oss(nil))
	if err != nil {
		t.Fatal(err)
	}
	wantMoE := &MoE{Experts: 8, TopK: 2, Intermediate: 128, SparseStep: 1}
	if c.Architecture != ArchGptOss || c.HeadDim != 64 || c.RopeTheta != 150000 || c.TieWordEmbeddings || !c.AttentionBias ||
		!reflect.DeepEqual(c.MoE, wantMoE) || c.SlidingWindow != 128 || !reflect.DeepEqual(c.Sliding, []bool{true, false, true, false}) ||
		!reflect.DeepEqual(c.GptOss, &GptOss{SwiGLUAlpha: 1.702, SwiGLULimit: 7}) {
		t.Errorf("defaults: %+v moe %+v gpt_oss %+v", c, c.MoE, c.GptOss)
	}
	c, err = ParseConfig(oss(obj{"sliding_window": 32, "layer_types": []string{"full_attention", "sliding_attention", "sliding_attention", "full_attention"}}))
	if err != nil {
		t.Fatal(err)
	}
	if c.SlidingWindow != 32 || !reflect.DeepEqual(c.Sliding, []bool{false, true, true, false}) {
		t.Errorf("layer_types: window %d sliding %v", c.SlidingWindow, c.Sliding)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"tied", oss(obj{"tie_word_embeddings": true}), ErrUnsupported, "tied"},
		{"more per token than experts", oss(obj{"num_experts_per_tok": 9}), ErrInvalidConfig, "9 per token"},
		{"zero experts", oss(obj{"num_local_experts": 0}), ErrInvalidConfig, "0 experts"},
		{"window zero", oss(obj{"sliding_window": 0}), ErrInvalidConfig, "sliding_window 0"},
		{"no full layer", oss(obj{"layer_types": []string{"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention"}}), ErrInvalidConfig, "both"},
		{"layer_types count", oss(obj{"layer_types": []string{"full_attention"}}), ErrInvalidConfig, "1 layer_types for 4 layers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.data)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}
