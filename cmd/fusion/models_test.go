package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestModelsCreateDemoAndInspect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errb bytes.Buffer
	args := []string{"models", "create-demo", "--arch", "llama", "--out", dir, "--layers", "1", "--quantize", "8", "--group-size", "32", "--seed", "3"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("create-demo exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "wrote "+dir+": llama, 1 layers") {
		t.Errorf("create-demo printed %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"models", "inspect", "--load-mode", "mmap", dir}, &out, &errb); code != 0 {
		t.Fatalf("inspect exited %d: %s", code, errb.String())
	}
	var r struct {
		Architecture string
		Dims         struct {
			HiddenSize      int `json:"hidden_size"`
			NumHiddenLayers int `json:"num_hidden_layers"`
			VocabSize       int `json:"vocab_size"`
		}
		Quantization struct {
			Bits      int
			GroupSize int `json:"group_size"`
		}
		Tensors     int
		WeightBytes int64  `json:"weight_bytes"`
		LoadMode    string `json:"load_mode"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// 1 layer: 2 norms + 7 quantized linears (3 tensors each), embedding
	// (3), final norm.
	if r.Architecture != "llama" || r.Dims.HiddenSize != 64 || r.Dims.NumHiddenLayers != 1 || r.Dims.VocabSize != 640 ||
		r.Quantization.Bits != 8 || r.Quantization.GroupSize != 32 || r.Tensors != 2+7*3+3+1 || r.WeightBytes <= 0 || r.LoadMode != "mmap" {
		t.Errorf("inspect: %+v", r)
	}
}

func TestModelsUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"models"}, 2, "fusion models: missing command"},
		{[]string{"models", "frobnicate"}, 2, `fusion models: unknown command "frobnicate"`},
		{[]string{"models", "create-demo"}, 2, "--out is required"},
		{[]string{"models", "create-demo", "--out", "x", "extra"}, 2, "unexpected argument"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--heads", "5"}, 1, "does not divide"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--format", "gguf", "--quantize", "5"}, 1, "no GGUF equivalent"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--stop-after", "-1"}, 1, "outside 0..256"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--experts", "4"}, 1, "need a mixture (--arch qwen3_moe"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--arch", "qwen3_moe", "--experts", "2", "--experts-per-tok", "3"}, 1, "exceeds --experts 2"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--arch", "deepseek_v3", "--format", "gguf"}, 1, "safetensors only"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--quant", "mxint4"}, 1, "unknown --quant"},
		{[]string{"models", "create-demo", "--out", t.TempDir(), "--quant", "mxfp4", "--format", "gguf"}, 1, "not GGUF's"},
		{[]string{"models", "inspect"}, 2, "usage: fusion models inspect"},
		{[]string{"models", "inspect", "--load-mode", "paged", "x"}, 2, "unknown load mode"},
		{[]string{"models", "inspect", t.TempDir()}, 1, "config.json"},
	}
	for _, tc := range tests {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d mentioning %q", tc.args, code, errb.String(), tc.code, tc.msg)
		}
	}
}

// A qwen3_moe demo in mxfp4: stacked experts as codes and uint8 scales,
// the router affine 8-bit (an override), all loadable.
func TestModelsCreateDemoMoE(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "moe")
	var out, errb bytes.Buffer
	args := []string{"models", "create-demo", "--arch", "qwen3_moe", "--out", dir, "--layers", "1", "--quant", "mxfp4", "--experts", "4", "--experts-per-tok", "2"}
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("create-demo exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "qwen3_moe, 1 layers") || !strings.Contains(out.String(), "4 experts of 64 (2 per token)") || !strings.Contains(out.String(), "mxfp4 4-bit, group 32") {
		t.Errorf("create-demo printed %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"models", "inspect", dir}, &out, &errb); code != 0 {
		t.Fatalf("inspect exited %d: %s", code, errb.String())
	}
	var r struct {
		Architecture string
		Quantization struct {
			Bits      int
			GroupSize int `json:"group_size"`
			Mode      string
			Overrides map[string]struct {
				Bits      int
				GroupSize int `json:"group_size"`
				Mode      string
			}
		}
		Tensors int
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// Norms 2 + q/k norms 2, attention 4×(codes, scales), router (codes,
	// scales, biases), 3 expert stacks ×2, embedding 2, final norm.
	router := r.Quantization.Overrides["model.layers.0.mlp.gate"]
	if r.Architecture != "qwen3_moe" || r.Quantization.Mode != "mxfp4" || r.Quantization.Bits != 4 || r.Quantization.GroupSize != 32 ||
		router.Mode != "affine" || router.Bits != 8 || router.GroupSize != 64 || r.Tensors != 2+2+4*2+3+3*2+2+1 {
		t.Errorf("inspect: %+v", r)
	}
}

// TestModelsCreateDemoFlux2: --arch flux2 writes the diffusers layout
// (its loading by diffusers is engine/flux2's TestCreateDemoLoadsInDiffusers).
func TestModelsCreateDemoFlux2(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "flux2")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"models", "create-demo", "--arch", "flux2", "--out", dir, "--seed", "4", "--dtype", "bf16"}, &out, &errb); code != 0 {
		t.Fatalf("create-demo exited %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "flux2 (Flux2KleinPipeline)") || !strings.Contains(out.String(), "bf16") {
		t.Errorf("create-demo printed %q", out.String())
	}
	for _, f := range []string{"model_index.json", "scheduler/scheduler_config.json", "transformer/diffusion_pytorch_model.safetensors",
		"vae/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors", "tokenizer/tokenizer.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if code := run(context.Background(), []string{"models", "create-demo", "--arch", "flux2", "--out", t.TempDir(), "--dtype", "f16"}, &out, &errb); code == 0 {
		t.Error("--dtype f16 accepted for flux2")
	}
	// --quantize 4: the transformer's config carries the quantization
	// block (group 32 by default for the 32-wide tiny transformer).
	out.Reset()
	qdir := filepath.Join(t.TempDir(), "flux2q")
	if code := run(context.Background(), []string{"models", "create-demo", "--arch", "flux2", "--out", qdir, "--quantize", "4"}, &out, &errb); code != 0 {
		t.Fatalf("create-demo --quantize 4 exited %d: %s", code, errb.String())
	}
	raw, err := os.ReadFile(filepath.Join(qdir, "transformer", "config.json"))
	if err != nil || !strings.Contains(out.String(), "affine 4-bit, group 32") || !strings.Contains(string(raw), `"group_size": 32`) {
		t.Errorf("create-demo --quantize 4 printed %q, config %s (%v)", out.String(), raw, err)
	}
	for _, bad := range [][]string{{"--quantize", "4", "--group-size", "64"}, {"--quantize", "7"}, {"--quantize", "4", "--quant", "mxfp4"}} {
		if code := run(context.Background(), append([]string{"models", "create-demo", "--arch", "flux2", "--out", t.TempDir()}, bad...), &out, &errb); code == 0 {
			t.Errorf("create-demo --arch flux2 %v accepted", bad)
		}
	}
}
