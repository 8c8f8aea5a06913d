package model

import (
	"math"
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// TestGemma3Softcap: with final_logit_softcapping set, a gemma3_text
// model's logits are tanh(l/cap)·cap of the uncapped ones.
func TestGemma3Softcap(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	path := smallModel(t, "gemma3_text", demo.Options{SlidingWindow: 8, SlidingPattern: 2})
	plain := load(t, be, path, Range{})
	toks := tokens(7, 30)
	want := forward(t, plain, []Input{{Seq: newSeq(t, plain), Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0]
	const limit = 3
	if err := editJSON(filepath.Join(path, "config.json"), map[string]any{"final_logit_softcapping": limit}); err != nil {
		t.Fatal(err)
	}
	capped := load(t, be, path, Range{})
	got := forward(t, capped, []Input{{Seq: newSeq(t, capped), Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0]
	beyond := 0
	for i, l := range want {
		if math.Abs(float64(l)) > limit {
			beyond++
		}
		if w := math.Tanh(float64(l)/limit) * limit; math.Abs(float64(got[i])-w) > 1e-5 {
			t.Fatalf("logit %d: %v, want tanh(%v/%d)·%d = %v", i, got[i], l, limit, limit, w)
		}
	}
	if beyond == 0 {
		t.Fatal("no logit beyond the cap: the test checks nothing")
	}
}
