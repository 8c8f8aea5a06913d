package model

import "fusion/engine/modelfile"

// architecture is how one family builds its layers.
type architecture struct {
	// load reads layer weights named prefix + "…" (prefix is
	// "model.layers.N.").
	load func(w *loader, prefix string) block
	// headDim is the width of one attention head.
	headDim func(c *modelfile.Config) int
	// setup, if set, adjusts the model's constants once the common ones
	// are set and before any weight is loaded (Gemma: attention scale,
	// per-layer windows and RoPE, embedding scale, norm offset, logit cap).
	setup func(m *Model) error
}

var architectures = map[string]architecture{
	modelfile.ArchLlama:      {load: loadLlama, headDim: configHeadDim},
	modelfile.ArchQwen2:      {load: loadQwen2, headDim: hiddenPerHead},
	modelfile.ArchQwen3:      {load: loadQwen3, headDim: configHeadDim},
	modelfile.ArchGemma3Text: {load: loadGemma3, headDim: configHeadDim, setup: setupGemma3},
	modelfile.ArchQwen3MoE:   {load: loadQwen3MoE, headDim: configHeadDim},
}

// configHeadDim is head_dim, which modelfile defaults to hidden/heads.
func configHeadDim(c *modelfile.Config) int { return c.HeadDim }

// hiddenPerHead ignores head_dim.
func hiddenPerHead(c *modelfile.Config) int { return c.HiddenSize / c.NumAttentionHeads }
