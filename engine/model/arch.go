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
	// loadModel, if set, loads model-level weights of the family after
	// the embedding (Gemma 4's per-layer inputs).
	loadModel func(m *Model, w *loader)
}

var architectures = map[string]architecture{
	modelfile.ArchLlama:      {load: loadLlama, headDim: configHeadDim, setup: setupWindows},
	modelfile.ArchQwen2:      {load: loadQwen2, headDim: hiddenPerHead},
	modelfile.ArchQwen3:      {load: loadQwen3, headDim: configHeadDim},
	modelfile.ArchGemma3Text: {load: loadGemma3, headDim: configHeadDim, setup: setupGemma3},
	modelfile.ArchQwen3MoE:   {load: loadQwen3MoE, headDim: configHeadDim},
	// Gemma 4: KV shared across layers, per-layer inputs (gemma4.go).
	modelfile.ArchGemma4Text: {load: loadGemma4, headDim: configHeadDim, setup: setupGemma4, loadModel: loadGemma4Extra},
	modelfile.ArchPhi3:       {load: loadPhi3, headDim: hiddenPerHead},
	// Mistral's text models are Llama's block with an explicit head_dim
	// (mlx-lm maps mistral to llama, and mistral3's text model too).
	modelfile.ArchMistral:  {load: loadLlama, headDim: configHeadDim, setup: setupWindows},
	modelfile.ArchMistral3: {load: loadLlama, headDim: configHeadDim, setup: setupWindows},
	// Ministral 3: Llama's block with position-scaled queries.
	modelfile.ArchMinistral3: {load: loadMinistral3, headDim: configHeadDim, setup: setupMinistral3},
	modelfile.ArchGptOss:     {load: loadGptOss, headDim: configHeadDim, setup: setupGptOss},
	// DeepSeek-V3's cache is one head of its latent and rotated key
	// features (headDim is that width; see deepseek.go).
	modelfile.ArchDeepseekV3: {load: loadDeepseekV3, headDim: mlaCacheDim, setup: setupDeepseekV3},
	modelfile.ArchGlm4MoE:    {load: loadGlm4MoE, headDim: configHeadDim, setup: setupGlm4MoE},
	// Gated DeltaNet hybrids: recurrent state per sequence (recurrent.go).
	modelfile.ArchQwen3Next: {load: loadQwen3Next, headDim: configHeadDim},
	// Qwen3.5/3.6: the same layers, unfused DeltaNet projections.
	modelfile.ArchQwen35:    {load: loadQwen3Next, headDim: configHeadDim},
	modelfile.ArchQwen35MoE: {load: loadQwen3Next, headDim: configHeadDim},
}

// configHeadDim is head_dim, which modelfile defaults to hidden/heads.
func configHeadDim(c *modelfile.Config) int { return c.HeadDim }

// hiddenPerHead ignores head_dim.
func hiddenPerHead(c *modelfile.Config) int { return c.HiddenSize / c.NumAttentionHeads }

// setupWindows gives the layers that layer_types names sliding_attention
// their window (llama and mistral; see modelfile.Config.Sliding).
func setupWindows(m *Model) error {
	c := m.Config
	if c.Sliding == nil {
		return nil
	}
	m.windows = make([]int, c.NumHiddenLayers)
	for i, s := range c.Sliding {
		if s {
			m.windows[i] = c.SlidingWindow
		}
	}
	return nil
}
