package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"

	"fusion/engine/demo"
)

//go:embed mlx_lm_bench.py
var mlxLMScript string

// MLXOptions are the settings of the MLX benchmark.
type MLXOptions struct {
	CacheDir string // directory the benchmark model is created in (reused)
	Layers   int    // layers of the Qwen3-0.6B-shaped model
	Prompt   int    // prompt tokens (one prefill step)
	Decode   int    // greedy decode steps after the first token
	Repeat   int    // runs of each side after a warm-up; medians are reported
}

// DefaultMLXOptions are the settings `make bench` uses: 4 of the 28
// layers, a 32-token prompt and 8 decode steps, once per side, so that
// both sides run in about 2 minutes on the mlx-cpu wheel of an idle
// 2-core machine, whose quantized product with bf16 activations costs as
// much per row at 64 rows as at 1 (no batching across rows), and whose
// 4-bit head over 151,936 tokens is most of a decode step. On a Mac
// (Metal), -layers 28 -prompt 512 -decode 128 -repeat 3 is the whole
// model.
//
// mlx-lm's prefill evaluates only the KV caches of all but the last
// prompt token, so MLX never computes the last layer's attention output,
// o_proj and MLP (nor its q) for those rows; the engine's prefill
// computes every layer for every row. That is 5 of the 7 products of one
// layer: with 4 layers mlx-lm does 18% less prefill work, with 28 layers
// 2.6% less.
func DefaultMLXOptions() MLXOptions {
	return MLXOptions{CacheDir: DefaultCacheDir, Layers: 4, Prompt: 32, Decode: 8, Repeat: 3}
}

// mlxSpeed is one side's figures.
type mlxSpeed struct {
	PrefillTokS float64   `json:"prefill_tok_s"`
	DecodeTokS  float64   `json:"decode_tok_s"`
	PrefillRuns []float64 `json:"prefill_tok_s_runs"`
	DecodeRuns  []float64 `json:"decode_tok_s_runs"`
	Tokens      []int     `json:"-"`
	Error       string    `json:"error,omitempty"`
}

// MLX measures the MLX backend against mlx-lm on the same model in the
// same run: a Qwen3-0.6B-shaped model (o.Layers of its 28 layers, the
// real 151,936-token vocabulary) in MLX 4-bit (group 64) with random
// weights, a prompt prefilled in one step, then greedy decoding. Ours
// runs through the engine's model layer (model.Forward, one step per
// token, logits read and the argmax taken in Go, as the runner does) on
// the MLX backend in native mode; mlx-lm runs generate_step on the same
// directory with the same libmlx (so the same device and threads). It
// reports both, the ratios, and whether the greedy tokens are the same.
func MLX(ctx context.Context, o MLXOptions, stdout, stderr io.Writer) error {
	if o.Layers < 1 || o.Prompt < 16 || o.Decode < 1 || o.Repeat < 1 {
		return optionErrorf("-layers, -decode and -repeat must be positive and -prompt at least 16")
	}
	shape := withOpts(demo0p6Shape(), func(d *demo.Options) { d.Layers, d.Quantize, d.GroupSize = o.Layers, 4, 64 })
	f := engineFormat{name: fmt.Sprintf("mlx-q4-%dlayers", o.Layers), opts: shape}
	out := map[string]any{
		"model":  fmt.Sprintf("random weights shaped like Qwen3-0.6B (%d of its 28 layers, hidden 1024, 16/8 heads × 128, intermediate 3072, vocab 151936), MLX 4-bit group 64", o.Layers),
		"prompt": o.Prompt, "decode": o.Decode, "repeat": o.Repeat,
	}
	fmt.Fprintf(stderr, "bench mlx: model\n")
	path, err := benchModel(o.CacheDir, f)
	if err != nil {
		return err
	}
	out["path"] = path
	prompt := make([]int, o.Prompt)
	for i := range prompt {
		prompt[i] = (i*7919 + 13) % 150000
	}
	fmt.Fprintf(stderr, "bench mlx: fusion\n")
	ours, info := runFusionMLX(ctx, path, prompt, o.Decode, o.Repeat)
	for k, v := range info {
		out[k] = v
	}
	fmt.Fprintf(stderr, "bench mlx: mlx-lm\n")
	ref := runMLXLM(ctx, path, prompt, o.Decode, o.Repeat)
	out["fusion"], out["mlx_lm"] = ours, ref
	if ours.Error == "" && ref.Error == "" {
		out["ratio"] = map[string]float64{"prefill": ours.PrefillTokS / ref.PrefillTokS, "decode": ours.DecodeTokS / ref.DecodeTokS}
		out["same_greedy_tokens"] = slices.Equal(ours.Tokens, ref.Tokens)
	}
	return json.NewEncoder(stdout).Encode(out)
}

// runMLXLM runs mlx_lm_bench.py with the reference Python.
func runMLXLM(ctx context.Context, path string, prompt []int, decode, repeat int) mlxSpeed {
	req, err := json.Marshal(map[string]any{"dir": path, "prompt": prompt, "decode": decode, "repeat": repeat})
	if err != nil {
		return mlxSpeed{Error: err.Error()}
	}
	cmd := exec.CommandContext(ctx, pythonPath(), "-c", mlxLMScript)
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return mlxSpeed{Error: fmt.Sprintf("mlx-lm (%s): %v: %s", pythonPath(), err, tail(stderr.String(), 400))}
	}
	var res struct {
		Prefill []float64 `json:"prefill_tok_s"`
		Decode  []float64 `json:"decode_tok_s"`
		Tokens  []int     `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return mlxSpeed{Error: "mlx-lm output: " + err.Error()}
	}
	if len(res.Prefill) == 0 || len(res.Decode) == 0 {
		return mlxSpeed{Error: "mlx-lm reported no runs"}
	}
	return mlxSpeed{PrefillTokS: median(res.Prefill), DecodeTokS: median(res.Decode), PrefillRuns: res.Prefill, DecodeRuns: res.Decode, Tokens: res.Tokens}
}

// median is the middle value of xs (the upper one of an even count).
func median(xs []float64) float64 {
	return slices.Sorted(slices.Values(xs))[len(xs)/2]
}

// tail is the last n bytes of s, trimmed.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	return s[max(0, len(s)-n):]
}
