package modelfile

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestParseGemmaMultimodal reads vision-language Gemma configs as mlx-lm
// 0.32.2 does: Gemma 3 4B's as Google ships it (a text_config of five
// keys, the rest mlx-lm's defaults; the top level's vocabulary, end
// tokens, dtype and quantization), and a Gemma 4 one whose text_config
// says a vocabulary the top level overrides.
func TestParseGemmaMultimodal(t *testing.T) {
	gemma3 := obj{
		"architectures": []string{"Gemma3ForConditionalGeneration"}, "model_type": "gemma3",
		"boi_token_index": 255999, "eoi_token_index": 256000, "eos_token_id": []int{1, 106}, "image_token_index": 262144,
		"mm_tokens_per_image": 256, "torch_dtype": "bfloat16",
		"text_config": obj{"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
			"rope_scaling": obj{"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
		"vision_config": obj{"model_type": "siglip_vision_model", "hidden_size": 1152},
		"quantization":  obj{"group_size": 64, "bits": 4},
	}
	c := parseObj(t, gemma3)
	want := Config{Architecture: ArchGemma3Text, ModelType: "gemma3", WeightPrefix: "language_model.",
		HiddenSize: 2560, IntermediateSize: 10240, NumHiddenLayers: 34, NumAttentionHeads: 8, NumKeyValueHeads: 4, HeadDim: 256,
		VocabSize: 262208, RopeTheta: 1e6, MaxPositionEmbeddings: 131072, TorchDType: "bfloat16"}
	got := Config{Architecture: c.Architecture, ModelType: c.ModelType, WeightPrefix: c.WeightPrefix,
		HiddenSize: c.HiddenSize, IntermediateSize: c.IntermediateSize, NumHiddenLayers: c.NumHiddenLayers,
		NumAttentionHeads: c.NumAttentionHeads, NumKeyValueHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
		VocabSize: c.VocabSize, RopeTheta: c.RopeTheta, MaxPositionEmbeddings: c.MaxPositionEmbeddings, TorchDType: c.TorchDType}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gemma3:\n got %+v\nwant %+v", got, want)
	}
	if g := c.Gemma; g == nil || g.SlidingWindow != 1024 || g.Sliding[4] != true || g.Sliding[5] != false || g.QueryPreAttnScalar != 256 {
		t.Errorf("gemma3: gemma fields %+v", g)
	}
	if !reflect.DeepEqual(c.EOSTokenIDs, TokenIDs{1, 106}) || c.Quantization == nil || c.Quantization.Bits != 4 ||
		c.RopeScaling == nil || c.RopeScaling.Type != RopeLinear || !reflect.DeepEqual(c.Architectures, []string{"Gemma3ForConditionalGeneration"}) {
		t.Errorf("gemma3: eos %v quantization %+v rope %+v architectures %v", c.EOSTokenIDs, c.Quantization, c.RopeScaling, c.Architectures)
	}

	gemma4 := obj{
		"architectures": []string{"Gemma4ForConditionalGeneration"}, "model_type": "gemma4", "vocab_size": 640,
		"text_config": obj{"model_type": "gemma4_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
			"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "vocab_size": 262144,
			"vocab_size_per_layer_input": 640, "num_kv_shared_layers": 2, "sliding_window_pattern": 2},
		"vision_config": obj{"model_type": "gemma4_vision"}, "audio_config": nil,
	}
	c = parseObj(t, gemma4)
	if c.Architecture != ArchGemma4Text || c.ModelType != "gemma4" || c.WeightPrefix != "language_model." || c.VocabSize != 640 ||
		c.Gemma4 == nil || c.Gemma4.KVShared != 2 || c.Gemma4.GlobalHeadDim != 32 {
		t.Errorf("gemma4: got %+v, gemma4 %+v", c, c.Gemma4)
	}
	// Found by the class name alone, too.
	delete(gemma4, "model_type")
	if c = parseObj(t, gemma4); c.Architecture != ArchGemma4Text || c.WeightPrefix != "language_model." {
		t.Errorf("gemma4 by class: got %+v", c)
	}

	for _, tc := range []struct {
		name string
		cfg  obj
		want error
		msg  string
	}{
		{"gemma3 without text_config", obj{"model_type": "gemma3"}, ErrInvalidConfig, "text_config"},
		{"gemma4 text_config not an object", obj{"model_type": "gemma4", "text_config": []int{1}}, ErrInvalidConfig, "text_config"},
		{"gemma3 bad text model", obj{"model_type": "gemma3", "text_config": obj{"hidden_size": 0}}, ErrInvalidConfig, "gemma3 text_config"},
		{"gemma3 bad vocabulary", obj{"model_type": "gemma3", "vocab_size": -1, "text_config": obj{}}, ErrInvalidConfig, "vocab_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseConfig(b)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}

func parseObj(t *testing.T, o obj) *Config {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
