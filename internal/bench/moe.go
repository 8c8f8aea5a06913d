package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
)

// MoEOptions are the settings of the mixture-of-experts benchmark.
type MoEOptions struct {
	CacheDir string // directory the benchmark model is created in (reused)
	Layers   int    // layers of the Qwen3-30B-A3B shape (it has 48)
	// DistinctLayers is how many layers have weights of their own; the
	// others repeat them (demo.Options.DistinctLayers): what creating
	// the model holds in float32, ~2.5 GB a layer.
	DistinctLayers int
	Prompt         int // prompt tokens (one prefill step)
	Decode         int // greedy decode steps
	Threads        int // compute goroutines (0: all cores)
	Repeat         int // prefill runs after a warm-up step; the median is reported
	// MLXLM runs mlx-lm on the same model in the same run, with a
	// prompt of MLXLMPrompt tokens and MLXLMDecode decode steps, once
	// (mlx-cpu's quantized products cost the same per row at 512 rows
	// as at 1, ~1 GMAC/s on a core with float32 activations: Prompt's 512
	// tokens would take it minutes); the engine runs again at those sizes
	// for the ratio.
	MLXLM                    bool
	MLXLMPrompt, MLXLMDecode int
	// GGUF also writes the same weights as a llama.cpp Q4_K_M file and
	// times the engine on it, and llama-bench (LlamaBench, when set) on
	// the same file.
	GGUF       bool
	LlamaBench string

	// shape replaces Qwen3-30B-A3B's sizes (the smoke test's tiny
	// mixture); Layers and DistinctLayers still apply.
	shape *demo.Options
}

// DefaultMoEOptions are the settings `make bench` uses: 16 of the 48
// layers, one of them drawn (creating the model holds its ~2.5 GB of
// float32 and the embedding's ~1.2 GB). Decode reads the 151,936 × 2048 output
// head (~175 MB at 4 bits) and, per layer, attention and the router
// (~11 MB) and the 8 routed experts of 128 (~21 MB): with the 2 layers
// this benchmark used to run, the head was 73% of the bytes a token
// reads, so decode timed the head, not the experts; with 16 it is ~25%
// and the layers' attention and experts are the rest (48: 10%). 16
// layers are 5.6 GB at 4 bits (the GGUF 6.6 GB), loaded in turn by
// fusion (read into memory), mlx-lm and llama-bench: room beside other
// work on a 24 GB machine. On this 2-core VM under other work (load
// 16–30) the part took 45 minutes and 935 CPU-seconds, creating the GGUF
// included; on a quiet one, 7 minutes and 386 CPU-seconds.
func DefaultMoEOptions() MoEOptions {
	return MoEOptions{CacheDir: DefaultCacheDir, Layers: 16, DistinctLayers: 1, Prompt: 512, Decode: 64, Repeat: 3,
		MLXLM: true, MLXLMPrompt: 32, MLXLMDecode: 8, GGUF: true}
}

// moeShape is Qwen3-30B-A3B's shape (hidden 2048, 32/4 heads × 128, 128
// experts of 768, 8 per token, every layer sparse, the real vocabulary)
// with o's layers, MLX 4-bit (group 64; routers 8-bit, as mlx-lm
// quantizes them).
func moeShape(o MoEOptions) demo.Options {
	s := demo.Options{Arch: "qwen3_moe", Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, Intermediate: 6144,
		Experts: 128, ExpertsPerTok: 8, MoEIntermediate: 768, SparseStep: 1, Quantize: 4, GroupSize: 64,
		VocabFrom: filepath.Join(fixturesDir(), "tokenizers", "qwen3"), Seed: 1}
	if o.shape != nil {
		s = *o.shape
	}
	s.Layers, s.DistinctLayers = o.Layers, o.DistinctLayers
	return s
}

// MoE measures prefill and decode tokens/s of the CPU engine on a
// random-weight, 4-bit model shaped like Qwen3-30B-A3B with fewer layers,
// and of mlx-lm (mlx-cpu, its scales, biases and norms cast to float32, so
// float32 activations as the engine's; see moeMLXLMScript) on the same
// files in the same run; with o.GGUF, of the engine and llama-bench on
// the same weights as a Q4_K_M GGUF. Each model reports the bytes of
// weights a decode step reads and the output head's share of them.
func MoE(ctx context.Context, o MoEOptions, stdout, stderr io.Writer) error {
	if o.Layers < 1 || o.Layers > 48 || o.DistinctLayers < 1 || o.DistinctLayers > o.Layers || o.Prompt < 1 || o.Decode < 1 || o.Repeat < 1 ||
		o.MLXLM && (o.MLXLMPrompt < 1 || o.MLXLMDecode < 1) {
		return optionErrorf("-layers must be 1..48, -distinct-layers 1..layers; -prompt, -decode, -repeat, -mlx-lm-prompt and -mlx-lm-decode positive")
	}
	shape := moeShape(o)
	f := engineFormat{name: "mlx-q4", opts: shape}
	out := map[string]any{
		"model": fmt.Sprintf("random weights, %d layers (the first %d drawn, the others repeating them; each layer's own bytes in the file), "+
			"hidden %d, %d/%d heads × %d, %d experts of %d, %d per token, every layer sparse, Qwen3's vocabulary; "+
			"Qwen3-30B-A3B has 48 layers of hidden 2048, 32/4 heads × 128, 128 experts of 768, 8 per token",
			o.Layers, o.DistinctLayers, shape.Hidden, shape.Heads, shape.KVHeads, shape.HeadDim, shape.Experts, shape.MoEIntermediate, shape.ExpertsPerTok),
		"quantization": "MLX 4-bit group 64, routers 8-bit",
		"prompt":       o.Prompt,
		"decode":       o.Decode,
		"note": "streamed_per_token counts what one decode step reads of the weights: the output head, attention, norms, routers " +
			"and experts_per_tok/experts of every layer's experts (the embedding's one row left out); decode_weight_gb_s is that times decode tok/s",
	}
	be := cpu.New(cpu.Options{Threads: o.Threads})
	defer be.Close()
	out["threads"] = be.Threads()
	fmt.Fprintf(stderr, "bench moe: creating or reusing the model\n")
	path, err := benchModelAt(filepath.Join(o.CacheDir, moeModelName(o, "mlx-q4")), f)
	out["path"] = path
	var streamed *streamedBytes
	if err == nil {
		streamed, err = moeStreamed(path, false, shape)
		out["streamed_per_token"] = streamed
	}
	r := &engineResult{}
	if err == nil {
		fmt.Fprintf(stderr, "bench moe: fusion\n")
		err = runEngine(ctx, be, path, o.Prompt, o.Decode, o.Repeat, nil, r)
	}
	if err != nil {
		r.Error = err.Error()
	}
	out["fusion"] = moeFusion(r, streamed)
	if o.MLXLM && err == nil {
		moeMLXLM(ctx, be, path, o, out, stderr)
	}
	if o.GGUF {
		out["gguf_q4_k_m"] = moeGGUF(ctx, be, o, stderr)
	}
	return json.NewEncoder(stdout).Encode(out)
}

// moeMLXLM runs mlx-lm and the engine at mlx-lm's sizes, into out's
// mlx_lm, fusion_at_mlx_lm_size and vs_mlx_lm.
func moeMLXLM(ctx context.Context, be *cpu.Backend, path string, o MoEOptions, out map[string]any, stderr io.Writer) {
	fmt.Fprintf(stderr, "bench moe: fusion at mlx-lm's sizes\n")
	r := &engineResult{}
	if err := runEngine(ctx, be, path, o.MLXLMPrompt, o.MLXLMDecode, 1, nil, r); err != nil {
		out["fusion_at_mlx_lm_size"] = map[string]any{"error": err.Error()}
		return
	}
	ours := engineSpeed{Prefill: r.PrefillTokS, Decode: r.DecodeTokS}
	out["fusion_at_mlx_lm_size"] = ours
	// The engine's weights (a heap buffer) go back to the OS before
	// mlx-lm loads its own copy.
	runtime.GC()
	debug.FreeOSMemory()
	fmt.Fprintf(stderr, "bench moe: mlx-lm\n")
	ref, err := mlxLMSpeed(ctx, path, o.MLXLMPrompt, o.MLXLMDecode, 1, be.Threads())
	if err != nil {
		out["mlx_lm"] = map[string]any{"error": err.Error()}
		return
	}
	out["mlx_lm"] = map[string]any{"prefill_tok_s": ref.Prefill, "decode_tok_s": ref.Decode, "prompt": o.MLXLMPrompt, "decode": o.MLXLMDecode,
		"activations": "float32 (set_dtype: mlx-cpu's quantized products run ~10x slower with bf16 activations)"}
	out["vs_mlx_lm"] = engineSpeed{Prefill: ours.Prefill / ref.Prefill, Decode: ours.Decode / ref.Decode}
}

// moeModelName names a benchmark model in the cache directory by its
// layers (and distinct layers where some repeat).
func moeModelName(o MoEOptions, format string) string {
	name := fmt.Sprintf("qwen3-30b-a3b-shape-%d-layers", o.Layers)
	if o.DistinctLayers < o.Layers {
		name += fmt.Sprintf("-%d-distinct", o.DistinctLayers)
	}
	return name + "-" + format
}

// moeFusion is the engine's result in the benchmark's JSON.
func moeFusion(r *engineResult, s *streamedBytes) map[string]any {
	res := map[string]any{"prefill_tok_s": r.PrefillTokS, "prefill_tok_s_runs": r.PrefillRuns, "decode_tok_s": r.DecodeTokS,
		"decode_empty_context_tok_s": r.DecodeEmptyTokS, "weight_bytes": r.WeightBytes, "peak_rss_bytes": r.PeakRSSBytes, "error": r.Error}
	if s != nil {
		res["decode_weight_gb_s"] = float64(s.PerToken) * r.DecodeTokS / 1e9
	}
	return res
}

// moeGGUF times the engine, and llama-bench when there is one, on the
// same random weights written as llama.cpp's qwen3moe Q4_K_M (stacked
// ffn_*_exps experts; Q6_K down projections, as llama.cpp gives the
// layers it upgrades; F32 routers).
func moeGGUF(ctx context.Context, be *cpu.Backend, o MoEOptions, stderr io.Writer) map[string]any {
	shape := moeShape(o)
	shape.Quantize, shape.GroupSize, shape.Format, shape.GGUFType = 0, 0, demo.FormatGGUF, "q4_k_m"
	fmt.Fprintf(stderr, "bench moe: creating or reusing the GGUF Q4_K_M model\n")
	path, err := benchModelAt(filepath.Join(o.CacheDir, moeModelName(o, "gguf-q4_k_m")), engineFormat{name: "gguf-q4_k_m", opts: shape})
	res := map[string]any{"path": path}
	var streamed *streamedBytes
	if err == nil {
		streamed, err = moeStreamed(path, true, shape)
		res["streamed_per_token"] = streamed
	}
	r := &engineResult{}
	if err == nil {
		fmt.Fprintf(stderr, "bench moe: fusion on the GGUF\n")
		err = runEngine(ctx, be, path, o.Prompt, o.Decode, o.Repeat, nil, r)
	}
	if err != nil {
		r.Error = err.Error()
	}
	res["fusion"] = moeFusion(r, streamed)
	runtime.GC()
	debug.FreeOSMemory()
	switch {
	case err != nil:
	case o.LlamaBench == "":
		res["llama_bench_error"] = "not run: no llama-bench (set LLAMA_BENCH, or run make test-deps, which builds it)"
	default:
		fmt.Fprintf(stderr, "bench moe: llama-bench on the GGUF\n")
		lb, err := llamaBench(ctx, o.LlamaBench, path, o.Prompt, o.Decode, be.Threads())
		if err != nil {
			res["llama_bench_error"] = err.Error()
			break
		}
		res["llama_bench"] = lb
		res["vs_llama_bench"] = engineSpeed{Prefill: r.PrefillTokS / lb.Prefill, Decode: r.DecodeTokS / lb.Decode, DecodeEmpty: r.DecodeEmptyTokS / lb.DecodeEmpty}
	}
	return res
}

// streamedBytes is what one decode step reads of a mixture's weights.
type streamedBytes struct {
	PerToken  int64   `json:"weight_bytes"`        // all of the below and attention, norms, routers
	Head      int64   `json:"head_bytes"`          // the output head (the embedding when tied)
	Experts   int64   `json:"active_expert_bytes"` // experts_per_tok/experts of the stacked experts
	HeadShare float64 `json:"head_share"`          // Head / PerToken
}

// moeStreamed counts, from the tensors of the model at path (MLX
// safetensors, or GGUF), the weights a decode step reads: the output head
// (lm_head, else the tied embedding), ExpertsPerTok/Experts of the stacked
// experts, and every other tensor but an untied embedding (one row of it
// is read).
func moeStreamed(path string, isGGUF bool, shape demo.Options) (*streamedBytes, error) {
	sizes := map[string]int64{}
	head, embed, experts := "lm_head.", "model.embed_tokens.", ".switch_mlp."
	if isGGUF {
		head, embed, experts = "output.", "token_embd.", "_exps."
		f, err := gguf.Open(path, gguf.LoadMmap)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		for _, t := range f.Tensors {
			sizes[t.Name] = int64(len(t.Data))
		}
	} else {
		w, err := modelfile.OpenWeights(path, safetensors.LoadMmap)
		if err != nil {
			return nil, err
		}
		defer w.Close()
		for _, n := range w.Names() {
			t, _ := w.Tensor(n)
			sizes[n] = int64(len(t.Data))
		}
	}
	tied := true
	for n := range sizes {
		if strings.HasPrefix(n, head) {
			tied = false
		}
	}
	s := &streamedBytes{}
	for name, n := range sizes {
		switch {
		case strings.HasPrefix(name, head), tied && strings.HasPrefix(name, embed):
			s.Head += n
		case strings.HasPrefix(name, embed):
			continue
		case strings.Contains(name, experts):
			n = n * int64(shape.ExpertsPerTok) / int64(shape.Experts)
			s.Experts += n
		}
		s.PerToken += n
	}
	if s.Head == 0 || s.Experts == 0 {
		return nil, fmt.Errorf("%s: no output head or no stacked experts among %d tensors", path, len(sizes))
	}
	s.HeadShare = float64(s.Head) / float64(s.PerToken)
	return s, nil
}

// moeMLXLMScript times mlx-lm on the CPU: the same prompt ids as runEngine,
// prefilled in one call (median of repeat runs on fresh caches), then
// greedy decode steps; it prints {"prefill_tok_s", "decode_tok_s"}. The
// model's float parameters (scales, biases, norms) are cast to float32,
// so its activations are float32 as the engine's are: mlx-cpu's 4-bit
// quantized matmul does ~0.9 GMAC per CPU-second so and ~0.08 with bf16
// (measured on this 2-core VM), which would leave little to compare. The
// prefill computes the logits of the last position only, as the engine
// does and as mlx-lm's own generate does (its prompt steps leave the
// logits unevaluated), not the output head for every prompt position.
const moeMLXLMScript = `
import json, statistics, sys, time
from pathlib import Path
import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model

# mlx-lm 0.32.2 passes global_scale=None to gather_qmm, which this mlx
# does not take; None is its default.
_gather_qmm = mx.gather_qmm
def _gather_qmm_compat(*args, global_scale=None, **kwargs):
    if global_scale is not None:
        kwargs["global_scale"] = global_scale
    return _gather_qmm(*args, **kwargs)
mx.gather_qmm = _gather_qmm_compat

mx.set_default_device(mx.cpu)
path, n, decode, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model, _ = load_model(Path(path))
model.set_dtype(mx.float32)
prompt = mx.array([[(i * 7919 + 13) % 150000 for i in range(n)]])
def last_logits(tokens, cache):
    h = model.model(tokens, cache=cache)[:, -1:, :]
    if model.args.tie_word_embeddings:
        return model.model.embed_tokens.as_linear(h)
    return model.lm_head(h)
warm = make_prompt_cache(model)
mx.eval(last_logits(prompt[:, :16], warm))
runs = []
for _ in range(repeat):
    cache = make_prompt_cache(model)
    start = time.perf_counter()
    logits = last_logits(prompt, cache)
    mx.eval(logits)
    runs.append(n / (time.perf_counter() - start))
tok = mx.argmax(logits[0, -1])
start = time.perf_counter()
for _ in range(decode):
    logits = model(tok.reshape(1, 1), cache=cache)
    tok = mx.argmax(logits[0, -1])
    mx.eval(tok)
json.dump({"prefill_tok_s": statistics.median(runs), "decode_tok_s": decode / (time.perf_counter() - start)}, sys.stdout)
`

func mlxLMSpeed(ctx context.Context, path string, prompt, decode, repeat, threads int) (*engineSpeed, error) {
	python := pythonPath()
	if _, err := os.Stat(python); err != nil {
		return nil, fmt.Errorf("reference python: %w (run `make test-deps`)", err)
	}
	cmd := exec.CommandContext(ctx, python, "-c", moeMLXLMScript, path, strconv.Itoa(prompt), strconv.Itoa(decode), strconv.Itoa(repeat))
	// MLX's CPU kernels use as many threads as OpenMP/BLAS give them.
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+strconv.Itoa(threads), "OPENBLAS_NUM_THREADS="+strconv.Itoa(threads))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		return nil, fmt.Errorf("mlx-lm: %w: %s", err, lines[len(lines)-1])
	}
	var s engineSpeed
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("mlx-lm output: %w", err)
	}
	return &s, nil
}
