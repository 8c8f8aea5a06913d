package model

import "fusion/engine/demo"

// gemma4Cases are TestParityMLXFamilies' gemma4_text models: 4 layers
// alternating sliding (window 100, shorter than the 512-token prompt) and
// full attention, the last two reading the first two's KV, k = v and a
// proportional RoPE (a quarter of the frequencies) on the full layers,
// which are twice as wide (global_head_dim 64 beside head_dim 32, as
// Gemma 4 E2B/E4B's 512 and 256: the demo's default),
// per-layer inputs, 8 experts (2 per token) beside the MLP of every
// layer, layer scalars and the logit soft-cap; in BF16 and MLX 4-bit
// (the routers at 8 bits, the per-layer embedding quantized). The 4-bit
// one is written as mlx-community ships Gemma 4 (create-demo
// --multimodal: model_type gemma4, text_config, weights under
// language_model. beside a vision tower), the BF16 one as a text-only
// gemma4_text checkpoint. mlx-lm loads every weight of the files
// strictly, so each part is in its reference.
func gemma4Cases() []parityCase {
	base := demo.Options{Arch: "gemma4_text", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Intermediate: 256,
		SlidingWindow: 100, SlidingPattern: 2, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 27}
	q4 := base
	q4.Quantize, q4.GroupSize, q4.Multimodal = 4, 64, true
	return []parityCase{
		{name: "gemma4_text-bf16", opts: base, tol: 1e-3},
		{name: "gemma4_text-multimodal-mlx4", opts: q4, tol: 1e-2},
	}
}
