package model

import "fusion/engine/demo"

// deltaNetCases, run by TestParityMLXFamilies, are the Gated DeltaNet
// hybrids (a 512-token prompt through the per-token recurrence: about 7 s
// of mlx-lm per model): Qwen3-Next with 4 layers
// (3 DeltaNet, 1 gated attention), 2 key heads and 4 value heads of 32
// features, a 4-tap convolution, 8 experts of 64 (2 per token) and a
// gated shared expert in every layer, in float32 on both sides (mlx-cpu's
// gather_mm is float32 only).
func deltaNetCases() []parityCase {
	next := demo.Options{Arch: "qwen3_next", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Intermediate: 256,
		Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 24}
	q4 := next
	q4.Quantize, q4.GroupSize = 4, 64
	// Qwen3.5: the same layers with unfused projections, under
	// language_model.; dense, or a mixture in every layer.
	dense := next
	dense.Arch, dense.Experts, dense.ExpertsPerTok, dense.MoEIntermediate, dense.Seed = "qwen3_5", 0, 0, 0, 25
	moe := next
	moe.Arch, moe.Seed = "qwen3_5_moe", 26
	moe4 := moe
	moe4.Quantize, moe4.GroupSize = 4, 64
	dense4 := dense
	dense4.Quantize, dense4.GroupSize = 4, 64
	fp := func(o demo.Options, mode string) demo.Options { o.QuantMode = mode; return o }
	return []parityCase{
		{name: "qwen3_5-bf16", opts: dense, tol: 1e-3},
		// Every Linear quantized, the DeltaNet's in_proj_b and in_proj_a
		// (a row per value head) too, as mlx_lm.convert does
		// (engine/demo TestMLXLMAgrees).
		{name: "qwen3_5-mlx4", opts: dense4, tol: 1e-2},
		// MLX's floating-point modes, as Qwen3.6-27B-mxfp8 ships, and
		// mxfp4 on the mixture (its router and shared-expert gate affine
		// 8-bit beside them); each mode on one of the two (the same
		// products), about 7 s of mlx-lm a model.
		{name: "qwen3_5-mxfp8", opts: fp(dense, "mxfp8"), tol: 1e-2},
		{name: "qwen3_5_moe-bf16", opts: moe, tol: 1e-3},
		{name: "qwen3_5_moe-mlx4", opts: moe4, tol: 1e-2},
		{name: "qwen3_5_moe-mxfp4", opts: fp(moe, "mxfp4"), tol: 1e-2},
		{name: "qwen3_next-bf16", opts: next, tol: 1e-3},
		// The router and shared-expert gate at 8 bits (mlx-lm's
		// quant_predicate), the rest 4.
		{name: "qwen3_next-mlx4", opts: q4, tol: 1e-2},
	}
}
