package model

import (
	"testing"
	"time"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// deltaNetCases are the Gated DeltaNet hybrids: Qwen3-Next with 4 layers
// (3 DeltaNet, 1 gated attention), 2 key heads and 4 value heads of 32
// features, a 4-tap convolution, 8 experts of 64 (2 per token) and a
// gated shared expert in every layer, in float32 on both sides (mlx-cpu's
// gather_mm is float32 only).
func deltaNetCases() []parityCase {
	next := demo.Options{Arch: "qwen3_next", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Intermediate: 256,
		Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 24}
	q4 := next
	q4.Quantize, q4.GroupSize = 4, 64
	return []parityCase{
		{name: "qwen3_next-bf16", opts: next, tol: 1e-3},
		// The router and shared-expert gate at 8 bits (mlx-lm's
		// quant_predicate), the rest 4.
		{name: "qwen3_next-mlx4", opts: q4, tol: 1e-2},
	}
}

// TestParityMLXDeltaNet is TestParityMLXFamilies for deltaNetCases: a
// 512-token prompt, 64 greedy steps, outputs not saturated.
func TestParityMLXDeltaNet(t *testing.T) {
	start := time.Now()
	py := mlxPython(t)
	t.Logf("python check: %v", time.Since(start))
	cases := deltaNetCases()
	dirs, prompt := parityModels(t, cases, "")
	t.Logf("models: %v", time.Since(start))
	start = time.Now()
	refs := runMLX(t, py, dirs, prompt, false)
	t.Logf("mlx-lm: %v", time.Since(start))
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkParity(t, be, dirs[i], prompt, refs[i], c.tol)
			checkNotSaturated(t, refs[i])
		})
	}
}
