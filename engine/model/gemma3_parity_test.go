package model

import (
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/internal/testenv"
)

// TestParityMLXGemma3 checks gemma3_text against mlx-lm as
// TestParityMLX does the other families: demo models with the real Gemma 3
// tokenizer (262,208 rows) and 4 layers alternating local and global
// attention, a local window of 100 positions, much shorter than the
// 512-token prompt, RoPE scaling (linear, 8) on the global layers, in BF16
// and MLX 4-bit; 64 greedy steps teacher-forced with mlx-lm's tokens. It
// also wants outputs that are not saturated: the top-1 probability varies
// across the steps and greedy decoding walks through many tokens.
func TestParityMLXGemma3(t *testing.T) {
	skipUnderRace(t)
	py := mlxPython(t)
	vocabDir := testenv.TokenizerDir(t, "gemma3")
	prompt := promptTokens(t, vocabDir, parityPrompt)
	base := demo.Options{Arch: "gemma3_text", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 256,
		SlidingWindow: 100, SlidingPattern: 2, Seed: 13, VocabFrom: vocabDir}
	// The 4-bit model is written as mlx-community ships Gemma 3 4B and up
	// (create-demo --multimodal: model_type gemma3, text_config, weights
	// under language_model. beside a vision tower).
	q4 := base
	q4.Quantize, q4.GroupSize, q4.Multimodal = 4, 64, true
	cases := []struct {
		name string
		opts demo.Options
		tol  float64
	}{
		{"gemma3-bf16", base, 1e-3},
		{"gemma3-multimodal-mlx4", q4, 1e-2},
	}
	dirs := make([]string, len(cases))
	for i, c := range cases {
		dirs[i] = filepath.Join(t.TempDir(), c.name)
		if _, err := demo.Create(dirs[i], c.opts); err != nil {
			t.Fatal(err)
		}
	}
	refs := runMLX(t, py, dirs, prompt, false)
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref := refs[i]
			checkParity(t, be, dirs[i], prompt, ref, c.tol)
			checkNotSaturated(t, ref)
		})
	}
}
