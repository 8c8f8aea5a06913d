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
// on MLX and on the CPU: a 100-token prefill and 4 decode steps agree
// within tol of the logits' scale (parityTol in float32 mode, nativeTol in
// native mode, bf16 activations), greedy alike. Native mode runs it
// without the experts: bf16 rounding may flip a token's routing, which no
// bound covers (the other mixtures skip NativeVsCPU for that reason).
func testGemma4(t *testing.T, be *Backend, cb *cpu.Backend, tol float64) {
	dir := filepath.Join(t.TempDir(), "m")
	o := demo.Options{Arch: "gemma4_text", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, Intermediate: 128,
		SlidingWindow: 20, SlidingPattern: 2, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 3}
	if !be.f32 {
		o.Experts, o.ExpertsPerTok, o.MoEIntermediate = 0, 0, 0
	}
	if _, err := demo.Create(dir, o); err != nil {
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
		if d > tol {
			t.Fatalf("step %d: max |Δ logit| %.3g of the logits' scale > %g", step, d, tol)
		}
		best := argmax(want)
		if next := argmax(got); next != best && topGap(want) > 2*tol*scaleOf(want) {
			t.Fatalf("step %d: greedy token %d, CPU %d", step, next, best)
		}
		toks = []int{best}
	}
	if ms.Len() != 104 {
		t.Errorf("MLX sequence holds %d positions, want 104", ms.Len())
	}
	t.Logf("max |Δ logit| / max |logit| over a 100-token prefill and 4 decode steps: %.3g", worst)
}
