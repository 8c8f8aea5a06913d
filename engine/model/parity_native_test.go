//go:build cgo

package model

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine/backend/mlx"
)

// Parity of the MLX backend in its native mode with mlx-lm's native path:
// the architectures and options of TestParityMLX (llama with llama3 and
// yarn RoPE, qwen2 with biases, qwen3) and TestParityMLXFamilies (phi3,
// mistral, mistral3, ministral3) in BF16, MLX 4-bit and MLX 8-bit,
// a 512-token prompt and 64 greedy steps, but neither side casts to
// float32: activations, KV caches and logits are bf16 (the models' bf16
// weights, or the bf16 scales of their quantized ones). Both build the
// same MLX graph on the same library. At every step the log-probabilities
// of mlx-lm's 8 most likely tokens agree within 1e-3 (BF16) or 1e-2
// (quantized), and our greedy token is mlx-lm's at every one of the 64
// steps (so running free, the 64 tokens are the same).
//
// The models use the demo's own tokenizer (640 tokens), not Qwen3's
// 151,936: MLX's CPU kernels for bf16 (no BLAS) and for quantized
// products with bf16 activations are slow, and a real vocabulary's head
// made the test take minutes per model on this machine.
func TestParityMLXNative(t *testing.T) {
	if err := mlx.Available(); err != nil {
		if os.Getenv("FUSION_REQUIRE_MLX") == "1" {
			t.Fatalf("FUSION_REQUIRE_MLX=1 and MLX is unavailable: %v", err)
		}
		t.Skipf("MLX unavailable: %v", err)
	}
	py := mlxPython(t)
	var cases []parityCase
	for _, c := range slices.Concat(parityCases(), nativeCases(), familyCases()) {
		switch {
		case c.name == "qwen3-mlx-mixed":
			// 8-bit is covered by its own cases; the mixed one would add
			// a slow model for nothing new in native mode.
		case strings.HasPrefix(c.name, "qwen3_moe"), strings.HasPrefix(c.name, "gpt_oss"),
			strings.HasPrefix(c.name, "deepseek_v3"), strings.HasPrefix(c.name, "glm4_moe"),
			strings.HasPrefix(c.name, "gemma4_text"): // its demo has experts beside the MLP
			// mlx-lm's experts run through gather_mm/gather_qmm, which
			// the mlx-cpu wheel evaluates in float32 only ("GatherMM
			// only supports float32"): there is no native reference here.
		case strings.HasPrefix(c.name, "qwen3_next"), strings.HasPrefix(c.name, "qwen3_5"):
			// The Gated DeltaNet hybrids: their mixtures are gather_mm's
			// (above), and the MLX backend runs the recurrence in float32
			// where mlx-lm's native path keeps bf16 activations: no native
			// reference yet.
		case strings.Contains(c.name, "fp4") || strings.Contains(c.name, "fp8"):
			// mxfp/nvfp models: checked in float32 (TestParityMLX); their
			// native-mode run is not part of this suite yet.
		default:
			cases = append(cases, c)
		}
	}
	dirs, prompt := parityModels(t, cases, "")
	start := time.Now()
	refs := runMLX(t, py, dirs, prompt, true)
	t.Logf("mlx-lm: %v", time.Since(start))

	be, err := mlx.New(mlx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := refs[i]
			// The demo weights give outputs that vary: a parity check on a
			// saturated model (top-1 probability ≈ 1 at every step) would
			// be weak.
			lo, hi := 1.0, 0.0
			for _, st := range ref.Steps {
				p := math.Exp(st.LogProbs[0])
				lo, hi = min(lo, p), max(hi, p)
			}
			if hi-lo < 0.1 || hi > 0.999 {
				t.Errorf("mlx-lm's top-1 probability ranges over [%.3f, %.3f]: too flat or saturated for a parity check", lo, hi)
			}
			got := teacherForced(t, be, dirs[i], prompt, ref.Tokens)
			maxDiff, _, _ := compareSteps(t, got, ref, c.tol)
			same := 0
			for j, lp := range got {
				if best := argmax(lp); best == ref.Tokens[j] {
					same++
				} else {
					t.Errorf("step %d: greedy token %d, mlx-lm %d", j, best, ref.Tokens[j])
				}
			}
			t.Logf("max |Δ logprob| over the top 8 of %d steps: %.2e (tolerance %.0e); greedy tokens identical on %d/%d steps; top-1 probability in [%.3f, %.3f]",
				len(ref.Steps), maxDiff, c.tol, same, len(got), lo, hi)
		})
	}
}

// nativeCases adds MLX 8-bit checkpoints (group 64) of the llama and qwen3
// demos to parityCases.
func nativeCases() []parityCase {
	var out []parityCase
	for _, c := range parityCases() {
		name, ok := map[string]string{"llama-bf16-llama3rope": "llama-mlx8-llama3rope", "qwen3-bf16": "qwen3-mlx8"}[c.name]
		if ok {
			c.name, c.tol = name, 1e-2
			c.opts.Quantize, c.opts.GroupSize = 8, 64
			out = append(out, c)
		}
	}
	return out
}
