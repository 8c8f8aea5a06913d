package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/race"
	"fusion/internal/testenv"
)

// TestBenchMoESmoke runs the MoE part of `make bench` end to end on a tiny
// mixture (3 layers, the third repeating the first, Qwen3's real
// vocabulary): its JSON parses, our prefill and decode are positive on the
// MLX and the GGUF files, mlx-lm's figures are there, and llama-bench's
// when its build is (under FUSION_REQUIRE_FIXTURES=1 it must be). The
// bytes a decode step reads are checked against the shape's arithmetic.
func TestBenchMoESmoke(t *testing.T) {
	if race.Enabled {
		t.Skip("slow under -race (a 151,936-token vocabulary, mlx-lm and llama.cpp beside it); make test runs it without -race")
	}
	t.Setenv("FUSION_PYTHON", testenv.Python(t))
	const (
		layers, hidden, heads, kvHeads, headDim = 3, 256, 4, 2, 64
		experts, perTok, moeInter               = 8, 2, 256
	)
	o := MoEOptions{CacheDir: t.TempDir(), Layers: layers, DistinctLayers: 2, Prompt: 16, Decode: 4, Threads: 1, Repeat: 1,
		MLXLM: true, MLXLMPrompt: 16, MLXLMDecode: 4, GGUF: true,
		shape: &demo.Options{Arch: "qwen3_moe", Hidden: hidden, Heads: heads, KVHeads: kvHeads, HeadDim: headDim,
			Experts: experts, ExpertsPerTok: perTok, MoEIntermediate: moeInter, SparseStep: 1, Quantize: 4, GroupSize: 64,
			VocabFrom: testenv.TokenizerDir(t, "qwen3"), Seed: 1}}
	dir, err := testenv.LlamaCppDir()
	switch {
	case err == nil:
		o.LlamaBench = filepath.Join(dir, "lib", "llama-bench")
	case testenv.Required():
		t.Fatalf("llama.cpp build not found (scripts/llamacpp.sh, run by make test-deps, builds it): %v", err)
	default:
		t.Logf("no llama-bench, its figures are not checked: %v", err)
	}
	var stdout, stderr bytes.Buffer
	if err := MoE(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	type run struct {
		Prefill     float64 `json:"prefill_tok_s"`
		Decode      float64 `json:"decode_tok_s"`
		DecodeEmpty float64 `json:"decode_empty_context_tok_s"`
		WeightBytes int64   `json:"weight_bytes"`
		DecodeGBs   float64 `json:"decode_weight_gb_s"`
		Error       string  `json:"error"`
	}
	var got struct {
		Path     string        `json:"path"`
		Streamed streamedBytes `json:"streamed_per_token"`
		Fusion   run           `json:"fusion"`
		MLXLM    struct {
			engineSpeed
			Error string `json:"error"`
		} `json:"mlx_lm"`
		FusionSmall *engineSpeed `json:"fusion_at_mlx_lm_size"`
		VsMLXLM     *engineSpeed `json:"vs_mlx_lm"`
		GGUF        struct {
			Streamed        streamedBytes `json:"streamed_per_token"`
			Fusion          run           `json:"fusion"`
			LlamaBench      *engineSpeed  `json:"llama_bench"`
			VsLlamaBench    *engineSpeed  `json:"vs_llama_bench"`
			LlamaBenchError string        `json:"llama_bench_error"`
		} `json:"gguf_q4_k_m"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	t.Logf("%s", stdout.String())
	for name, r := range map[string]run{"mlx-q4": got.Fusion, "gguf-q4_k_m": got.GGUF.Fusion} {
		if r.Error != "" || r.Prefill <= 0 || r.Decode <= 0 || r.DecodeEmpty <= 0 || r.DecodeGBs <= 0 {
			t.Errorf("fusion on %s: %+v", name, r)
		}
	}
	if got.MLXLM.Error != "" || got.MLXLM.Prefill <= 0 || got.MLXLM.Decode <= 0 || got.VsMLXLM == nil ||
		got.FusionSmall == nil || got.FusionSmall.Prefill <= 0 || got.FusionSmall.Decode <= 0 {
		t.Errorf("mlx-lm: %+v, fusion at its size %v, ratios %v", got.MLXLM, got.FusionSmall, got.VsMLXLM)
	}
	if o.LlamaBench != "" {
		lb := got.GGUF.LlamaBench
		if lb == nil || lb.Prefill <= 0 || lb.Decode <= 0 || lb.DecodeEmpty <= 0 || got.GGUF.VsLlamaBench == nil {
			t.Errorf("llama-bench: %+v (%s)", lb, got.GGUF.LlamaBenchError)
		}
	} else if got.GGUF.LlamaBenchError == "" {
		t.Error("no llama-bench and no llama_bench_error")
	}

	// The MLX file's bytes per decode step, from the shape: 4-bit
	// matrices with a bf16 scale and bias per 64 columns, the router at 8
	// bits, bf16 norms, the tied embedding as the head, perTok of the
	// experts.
	cfg, err := os.ReadFile(filepath.Join(got.Path, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Vocab int64 `json:"vocab_size"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil || c.Vocab < 151669 {
		t.Fatalf("vocab_size %d: %v", c.Vocab, err)
	}
	affine := func(out, in, bits int64) int64 { return out*in*bits/8 + out*(in/64)*4 }
	q, kv := int64(heads*headDim), int64(kvHeads*headDim)
	head := affine(c.Vocab, hidden, 4)
	expert := 2*affine(experts*moeInter, hidden, 4) + affine(experts*hidden, moeInter, 4)
	layer := affine(q, hidden, 4) + 2*affine(kv, hidden, 4) + affine(hidden, q, 4) + affine(experts, hidden, 8) +
		(2*hidden+2*headDim)*2 + expert*perTok/experts
	want := streamedBytes{PerToken: head + layers*layer + hidden*2, Head: head, Experts: layers * expert * perTok / experts}
	want.HeadShare = float64(want.Head) / float64(want.PerToken)
	if got.Streamed != want {
		t.Errorf("streamed per token %+v, want %+v", got.Streamed, want)
	}
	if s := got.GGUF.Streamed; s.Head <= 0 || s.Experts <= 0 || s.PerToken <= s.Head+s.Experts || s.PerToken >= got.GGUF.Fusion.WeightBytes ||
		s.HeadShare <= 0 || s.HeadShare >= 1 {
		t.Errorf("GGUF streamed per token %+v of %d bytes", s, got.GGUF.Fusion.WeightBytes)
	}
}
