package gguf

import (
	"reflect"
	"strings"
	"testing"

	"fusion/engine/tensor"
)

func TestModelConfigRoundTrip(t *testing.T) {
	want := ModelConfig{
		ModelType: "qwen3", HiddenSize: 64, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		HeadDim: 32, IntermediateSize: 128, RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 40960,
		VocabSize: 151936, TieWordEmbeddings: true,
	}
	f := parseMeta(t, want.KVs())
	got, err := f.ModelConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("ModelConfig = %+v\nwant          %+v", got, want)
	}
	if v, _ := f.Meta("qwen3.attention.layer_norm_rms_epsilon").Any().(float32); v != float32(1e-6) {
		t.Errorf("epsilon stored as %v (%T), want float32", f.Meta("qwen3.attention.layer_norm_rms_epsilon").Any(), f.Meta("qwen3.attention.layer_norm_rms_epsilon").Any())
	}
}

// A mixture's config round-trips through llama.cpp's qwen3moe keys:
// model_type qwen3_moe is written as general.architecture qwen3moe, the
// expert_* keys are read back, expert_weights_norm only when written, and
// a missing expert_used_count is an error.
func TestModelConfigMoE(t *testing.T) {
	yes := true
	for _, norm := range []*bool{nil, &yes} {
		want := ModelConfig{
			ModelType: "qwen3_moe", HiddenSize: 2048, NumHiddenLayers: 48, NumAttentionHeads: 32, NumKeyValueHeads: 4,
			HeadDim: 128, IntermediateSize: 6144, RMSNormEps: 1e-6, RopeTheta: 1e6, MaxPositionEmbeddings: 40960,
			VocabSize: 151936, TieWordEmbeddings: true, Experts: 128, ExpertsUsed: 8, ExpertIntermediate: 768, NormTopK: norm,
		}
		f := parseMeta(t, want.KVs())
		if a := f.Architecture(); a != "qwen3moe" {
			t.Errorf("general.architecture %q, want qwen3moe", a)
		}
		if n, _ := f.Meta("qwen3moe.expert_count").AsInt64(); n != 128 {
			t.Errorf("qwen3moe.expert_count = %d", n)
		}
		got, err := f.ModelConfig()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ModelConfig = %+v\nwant          %+v", got, want)
		}
	}
	var kvs []KV
	for _, kv := range (ModelConfig{ModelType: "qwen3_moe", HiddenSize: 64, NumHiddenLayers: 2, NumAttentionHeads: 4,
		IntermediateSize: 128, Experts: 8, ExpertsUsed: 2, ExpertIntermediate: 64}).KVs() {
		if kv.Key != "qwen3moe.expert_used_count" {
			kvs = append(kvs, kv)
		}
	}
	if _, err := parseMeta(t, kvs).ModelConfig(); err == nil || !strings.Contains(err.Error(), "expert_used_count") {
		t.Errorf("no expert_used_count: error %v", err)
	}
}

func TestModelConfigDefaultsAndTensors(t *testing.T) {
	meta := []KV{
		{KeyArchitecture, String("llama")},
		{"llama.embedding_length", Uint32(64)},
		{"llama.block_count", Uint32(3)},
		{"llama.attention.head_count", Uint32(8)},
		{"llama.feed_forward_length", Uint64(256)},
		{KeyTokens, Array([]string{"a", "b", "c"})},
	}
	embd := WriteTensor{Name: "token_embd.weight", DType: tensor.F32, Shape: []int64{5, 64}, Data: make([]byte, 5*64*4)}
	out := WriteTensor{Name: "output.weight", DType: tensor.F32, Shape: []int64{5, 64}, Data: make([]byte, 5*64*4)}
	tests := []struct {
		name    string
		tensors []WriteTensor
		vocab   int
		tied    bool
	}{
		{"tokens only", nil, 3, true},
		{"embedding rows", []WriteTensor{embd}, 5, true},
		{"untied", []WriteTensor{embd, out}, 5, false},
	}
	for _, tc := range tests {
		f, err := Parse("cfg", writeSample(t, meta, tc.tensors))
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.ModelConfig()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := ModelConfig{ModelType: "llama", HiddenSize: 64, NumHiddenLayers: 3, NumAttentionHeads: 8, NumKeyValueHeads: 8,
			HeadDim: 8, IntermediateSize: 256, RMSNormEps: 1e-5, RopeTheta: 10000, VocabSize: tc.vocab, TieWordEmbeddings: tc.tied}
		if c != want {
			t.Errorf("%s: %+v\nwant %+v", tc.name, c, want)
		}
	}
}

func TestModelConfigErrors(t *testing.T) {
	base := ModelConfig{ModelType: "llama", HiddenSize: 64, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 4,
		HeadDim: 16, IntermediateSize: 128, RMSNormEps: 1e-5, RopeTheta: 5e5}
	drop := func(key string) []KV {
		var out []KV
		for _, kv := range base.KVs() {
			if kv.Key != key {
				out = append(out, kv)
			}
		}
		return out
	}
	for _, key := range []string{KeyArchitecture, "llama.embedding_length", "llama.block_count", "llama.attention.head_count", "llama.feed_forward_length"} {
		_, err := parseMeta(t, drop(key)).ModelConfig()
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("without %s: error %v", key, err)
		}
	}
	meta := append(drop("llama.block_count"), KV{"llama.block_count", String("2")})
	if _, err := parseMeta(t, meta).ModelConfig(); err == nil {
		t.Error("string block_count: no error")
	}
}
