//go:build cgo

package mlx

import (
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/model"
)

// testGemma4 runs a gemma4_text demo (KV shared by the last two of four
// layers, full layers twice as wide as sliding ones, per-layer inputs, experts beside the MLP, windows of 20) on MLX
// in float32 mode and on the CPU: a 100-token prefill and 4 decode steps
// agree within parityTol of the logits' scale, greedy alike.
func testGemma4(t *testing.T, be *Backend, cb *cpu.Backend) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := demo.Create(dir, demo.Options{Arch: "gemma4_text", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, Intermediate: 128,
		SlidingWindow: 20, SlidingPattern: 2, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	mm, cm, ms, cs := loadPair(t, be, cb, dir)
	toks := promptTokens(1, 100)
	worst := 0.0
	for step := range 5 {
		got := fwd(t, mm, []model.Input{{Seq: ms, Tokens: toks}}, model.Range{}, nil).Logits[0]
		want := fwd(t, cm, []model.Input{{Seq: cs, Tokens: toks}}, model.Range{}, nil).Logits[0]
		d := maxDiff(got, want)
		worst = max(worst, d)
		if d > parityTol {
			t.Fatalf("step %d: max |Δ logit| %.3g of the logits' scale > %g", step, d, parityTol)
		}
		best := argmax(want)
		if next := argmax(got); next != best && topGap(want) > 2*parityTol*scaleOf(want) {
			t.Fatalf("step %d: greedy token %d, CPU %d", step, next, best)
		}
		toks = []int{best}
	}
	if ms.Len() != 104 {
		t.Errorf("MLX sequence holds %d positions, want 104", ms.Len())
	}
	t.Logf("max |Δ logit| / max |logit| over a 100-token prefill and 4 decode steps: %.3g", worst)
}
