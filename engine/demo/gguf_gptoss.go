package demo

import (
	"fmt"
	"strings"

	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// gpt-oss as llama.cpp's converter writes it (its GptOssModel): the
// architecture gpt-oss with the sliding window and yarn keys, tensor names
// of gguf-py's MODEL_ARCH.GPT_OSS (gguf.GGUFNameFor), the stacked experts
// in ggml's MXFP4 — the checkpoint's own MXFP4 blocks repacked, never
// requantized: here the codes and scales MLX's mxfp4 gives the same
// weights (modelfile.QuantizeFP), so a gpt_oss demo written with --quant
// mxfp4 and its GGUF hold the same expert values — every bias, the sinks
// and the router in F32, the other matrices in the file's type.

// gptOssGGUFConfig adds gpt-oss's keys to cfg: the mixture (its experts'
// width is intermediate_size, written as both feed_forward_length and
// expert_feed_forward_length), the window and the yarn scaling.
func gptOssGGUFConfig(p Params, cfg *gguf.ModelConfig) error {
	cfg.Experts, cfg.ExpertsUsed, cfg.ExpertIntermediate = p.Experts, p.ExpertsPerTok, p.Intermediate
	cfg.SlidingWindow = p.SlidingWindow
	r := p.RopeScaling
	factor, fok := r["factor"].(float64)
	orig, ook := r["original_max_position_embeddings"].(int)
	fast, bok := r["beta_fast"].(float64)
	slow, sok := r["beta_slow"].(float64)
	if r["rope_type"] != modelfile.RopeYarn || !fok || !ook || !bok || !sok {
		return fmt.Errorf("demo: gpt_oss rope scaling %v is not the yarn block llama.cpp's keys hold", r)
	}
	cfg.Yarn = &gguf.YarnScaling{Factor: factor, OriginalContext: orig, BetaFast: fast, BetaSlow: slow}
	return nil
}

// gptOssGGUFTensor stores one gpt-oss tensor (GGUF name): the stacked
// experts in MXFP4, biases, sinks and the router in F32, the rest as
// tensorType picks for kind; dt is the model's dtype, which MLX quantizes
// in.
func gptOssGGUFTensor(kind, name string, shape []int64, data []float32, dt tensor.DType) (gguf.WriteTensor, error) {
	switch {
	case strings.HasSuffix(name, "_exps.weight"):
		cols := int(shape[len(shape)-1])
		if cols%32 != 0 {
			return gguf.WriteTensor{}, fmt.Errorf("demo: %s: rows of %d values are not whole MXFP4 blocks of 32 (--hidden and --moe-intermediate must be multiples of 32)", name, cols)
		}
		codes, scales, err := modelfile.QuantizeFP(modelfile.ModeMXFP4, dt, data, len(data)/cols, cols)
		if err != nil {
			return gguf.WriteTensor{}, fmt.Errorf("demo: %s: %w", name, err)
		}
		blocks, err := gguf.MXFP4FromMLX(codes, scales)
		if err != nil {
			return gguf.WriteTensor{}, fmt.Errorf("demo: %s: %w", name, err)
		}
		return gguf.WriteTensor{Name: name, DType: tensor.MXFP4, Shape: shape, Data: blocks}, nil
	case strings.HasSuffix(name, ".bias") || strings.HasSuffix(name, ".attn_sinks.weight"):
		return gguf.QuantizeTensor(name, tensor.F32, shape, data)
	}
	return gguf.QuantizeTensor(name, tensorType(kind, name, shape), shape, data)
}
