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
	"strconv"
	"strings"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// MoEOptions are the settings of the mixture-of-experts benchmark.
type MoEOptions struct {
	CacheDir string // directory the benchmark model is created in (reused)
	Layers   int    // layers of the Qwen3-30B-A3B shape (it has 48)
	Prompt   int    // prompt tokens (one prefill step)
	Decode   int    // greedy decode steps
	Threads  int    // compute goroutines (0: all cores)
	Repeat   int    // prefill runs after a warm-up step; the median is reported
	// MLXLM runs mlx-lm on the same model in the same run.
	MLXLM bool
	// GGUF also writes the same weights as a llama.cpp Q4_K_M file and
	// times the engine on it, and llama-bench (LlamaBench, when set) on
	// the same file.
	GGUF       bool
	LlamaBench string
}

// DefaultMoEOptions are the settings `make bench` uses: 2 of the 48
// layers, so that the model (≈1.3 GB at 4 bits; its float32 weights while
// it is created, ≈5 GB) fits a shared machine.
func DefaultMoEOptions() MoEOptions {
	return MoEOptions{CacheDir: DefaultCacheDir, Layers: 2, Prompt: 512, Decode: 64, Repeat: 3, MLXLM: true, GGUF: true}
}

// moeShape is Qwen3-30B-A3B's shape (hidden 2048, 32/4 heads × 128, 128
// experts of 768, 8 per token, every layer sparse, the real vocabulary)
// with the given number of layers, MLX 4-bit (group 64; routers 8-bit, as
// mlx-lm quantizes them).
func moeShape(layers int) demo.Options {
	return demo.Options{Arch: "qwen3_moe", Layers: layers, Hidden: 2048, Heads: 32, KVHeads: 4, HeadDim: 128, Intermediate: 6144,
		Experts: 128, ExpertsPerTok: 8, MoEIntermediate: 768, SparseStep: 1, Quantize: 4, GroupSize: 64,
		VocabFrom: filepath.Join(fixturesDir(), "tokenizers", "qwen3"), Seed: 1}
}

// MoE measures prefill and decode tokens/s of the CPU engine on a
// random-weight, 4-bit model shaped like Qwen3-30B-A3B with few layers,
// and of mlx-lm (mlx-cpu, the model's own bf16 activations) on the same
// files in the same run.
func MoE(ctx context.Context, o MoEOptions, stdout, stderr io.Writer) error {
	if o.Layers < 1 || o.Layers > 48 || o.Prompt < 1 || o.Decode < 1 || o.Repeat < 1 {
		return optionErrorf("-layers must be 1..48; -prompt, -decode and -repeat positive")
	}
	shape := moeShape(o.Layers)
	f := engineFormat{name: "mlx-q4", opts: shape}
	out := map[string]any{
		"model": fmt.Sprintf("random weights shaped like Qwen3-30B-A3B with %d of its 48 layers (hidden 2048, 32/4 heads × 128, "+
			"128 experts of 768, 8 per token, vocab 151936), MLX 4-bit group 64, routers 8-bit", o.Layers),
		"prompt": o.Prompt,
		"decode": o.Decode,
	}
	be := cpu.New(cpu.Options{Threads: o.Threads})
	defer be.Close()
	out["threads"] = be.Threads()
	fmt.Fprintf(stderr, "bench moe: creating or reusing the model\n")
	path, err := benchModelAt(filepath.Join(o.CacheDir, fmt.Sprintf("qwen3-30b-a3b-shape-%d-layers-mlx-q4", o.Layers)), f)
	out["path"] = path
	r := &engineResult{}
	if err == nil {
		fmt.Fprintf(stderr, "bench moe: fusion\n")
		err = runEngine(ctx, be, path, o.Prompt, o.Decode, o.Repeat, nil, r)
	}
	if err != nil {
		r.Error = err.Error()
	}
	out["fusion"] = map[string]any{"prefill_tok_s": r.PrefillTokS, "prefill_tok_s_runs": r.PrefillRuns, "decode_tok_s": r.DecodeTokS,
		"weight_bytes": r.WeightBytes, "peak_rss_bytes": r.PeakRSSBytes, "error": r.Error}
	if o.MLXLM && err == nil {
		fmt.Fprintf(stderr, "bench moe: mlx-lm\n")
		ref, err := mlxLMSpeed(ctx, path, o.Prompt, o.Decode, o.Repeat, be.Threads())
		if err != nil {
			out["mlx_lm"] = map[string]any{"error": err.Error()}
		} else {
			out["mlx_lm"] = ref
			out["vs_mlx_lm"] = engineSpeed{Prefill: r.PrefillTokS / ref.Prefill, Decode: r.DecodeTokS / ref.Decode}
		}
	}
	if o.GGUF {
		out["gguf_q4_k_m"] = moeGGUF(ctx, be, o, stderr)
	}
	return json.NewEncoder(stdout).Encode(out)
}

// moeGGUF times the engine, and llama-bench when there is one, on the
// same random weights written as llama.cpp's qwen3moe Q4_K_M (stacked
// ffn_*_exps experts; Q6_K down projections in the layers llama.cpp
// gives more bits, F32 routers).
func moeGGUF(ctx context.Context, be *cpu.Backend, o MoEOptions, stderr io.Writer) map[string]any {
	shape := moeShape(o.Layers)
	shape.Quantize, shape.GroupSize, shape.Format, shape.GGUFType = 0, 0, demo.FormatGGUF, "q4_k_m"
	fmt.Fprintf(stderr, "bench moe: creating or reusing the GGUF Q4_K_M model\n")
	path, err := benchModelAt(filepath.Join(o.CacheDir, fmt.Sprintf("qwen3-30b-a3b-shape-%d-layers-gguf-q4_k_m", o.Layers)),
		engineFormat{name: "gguf-q4_k_m", opts: shape})
	res := map[string]any{"path": path}
	r := &engineResult{}
	if err == nil {
		fmt.Fprintf(stderr, "bench moe: fusion on the GGUF\n")
		err = runEngine(ctx, be, path, o.Prompt, o.Decode, o.Repeat, nil, r)
	}
	if err != nil {
		r.Error = err.Error()
	}
	res["fusion"] = map[string]any{"prefill_tok_s": r.PrefillTokS, "prefill_tok_s_runs": r.PrefillRuns, "decode_tok_s": r.DecodeTokS,
		"decode_empty_context_tok_s": r.DecodeEmptyTokS, "weight_bytes": r.WeightBytes, "peak_rss_bytes": r.PeakRSSBytes, "error": r.Error}
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

// moeMLXLMScript times mlx-lm on the CPU: the same prompt ids as runEngine,
// prefilled in one call (median of repeat runs on fresh caches), then
// greedy decode steps; it prints {"prefill_tok_s", "decode_tok_s"}.
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
prompt = mx.array([[(i * 7919 + 13) % 150000 for i in range(n)]])
warm = make_prompt_cache(model)
mx.eval(model(prompt[:, :16], cache=warm))
runs = []
for _ in range(repeat):
    cache = make_prompt_cache(model)
    start = time.perf_counter()
    logits = model(prompt, cache=cache)
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
