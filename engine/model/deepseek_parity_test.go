package model

import "fusion/engine/demo"

// deepseekCases, run by TestParityMLXFamilies (one mlx-lm process for
// all families), are DeepSeek-V3 demos: 4 heads of latent attention (q
// LoRA 64, latent 64, 32 rotated features, nope and v 64, yarn ×40 with
// mscale_all_dim), a dense first layer, then 8 sigmoid-routed experts of
// 64 in 4 groups of which 2 are kept, 2 experts per token, one shared
// expert, routed_scaling_factor 2.5.
func deepseekCases() []parityCase {
	ds := demo.Options{Arch: "deepseek_v3", Layers: 3, Hidden: 128, Heads: 4, HeadDim: 64, Intermediate: 256,
		Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 22}
	q4 := ds
	q4.Quantize, q4.GroupSize = 4, 64
	// GLM-4.5: GQA 4/2 with q/k/v biases, RoPE on 32 of 64 features, the
	// same router (one group), a dense first layer.
	glm := demo.Options{Arch: "glm4_moe", Layers: 3, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 256,
		Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 23}
	glm4 := glm
	glm4.Quantize, glm4.GroupSize = 4, 64
	return []parityCase{
		{name: "deepseek_v3-bf16", opts: ds, tol: 1e-3},
		// Everything quantized but the routers (MoEGate is no Linear),
		// embed_q and unembed_out as stacked 4-bit MultiLinears.
		{name: "deepseek_v3-mlx4", opts: q4, tol: 1e-2},
		{name: "glm4_moe-bf16", opts: glm, tol: 1e-3},
		{name: "glm4_moe-mlx4", opts: glm4, tol: 1e-2},
	}
}
