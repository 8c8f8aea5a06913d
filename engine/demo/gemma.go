package demo

import (
	"fmt"
	"math"

	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// Gemma 3 demo models (gemma3_text) in the layout of mlx-community's
// gemma-3 text checkpoints: Gemma3ForCausalLM's config.json keys, tied
// embeddings, norm weights stored as w for a scale of 1 + w, four norms
// per layer and q/k norms.

// resolveGemma checks the architecture and what gemma3_text allows.
func (o *Options) resolveGemma() error {
	switch o.Arch {
	case modelfile.ArchLlama, modelfile.ArchQwen3, modelfile.ArchQwen3MoE:
		if o.SlidingWindow != 0 || o.SlidingPattern != 0 {
			return fmt.Errorf("demo: a sliding window is only for gemma3_text, mistral, mistral3 and ministral3")
		}
		return nil
	case modelfile.ArchGemma3Text:
	case modelfile.ArchGemma4Text:
		return o.resolveGemma4()
	case modelfile.ArchPhi3, modelfile.ArchMistral, modelfile.ArchMistral3, modelfile.ArchMinistral3, modelfile.ArchGptOss, modelfile.ArchDeepseekV3, modelfile.ArchGlm4MoE, modelfile.ArchQwen3Next, modelfile.ArchQwen35, modelfile.ArchQwen35MoE:
		return nil // resolveFamily, resolveDeepseek
	default:
		return fmt.Errorf("demo: unknown arch %q (want %s)", o.Arch, archList)
	}
	if err := o.checkGemma(); err != nil {
		return err
	}
	if o.SlidingWindow == 0 {
		o.SlidingWindow = 512
	}
	if o.SlidingPattern == 0 {
		o.SlidingPattern = 6
	}
	return nil
}

// checkGemma refuses what neither Gemma family's demo writes.
func (o *Options) checkGemma() error {
	switch {
	case o.StopAfter != 0:
		return fmt.Errorf("demo: --stop-after is not supported for %s", o.Arch)
	case o.Format == FormatGGUF:
		return fmt.Errorf("demo: %s demos are written as safetensors only", o.Arch)
	case o.Untied:
		return fmt.Errorf("demo: %s ties its embeddings", o.Arch)
	case o.SlidingWindow < 0 || o.SlidingPattern < 0:
		return fmt.Errorf("demo: sliding window and pattern must be positive")
	}
	return nil
}

// gemma sets Gemma 3's hyperparameters (Gemma 3 4B's RoPE: linear
// scaling by 8 on the global layers).
func (p *Params) gemma(o Options) {
	p.MaxPositions, p.RMSNormEps, p.RopeTheta = 32768, 1e-6, 1000000
	p.RopeScaling = map[string]any{"factor": 8.0, "rope_type": "linear"}
	p.SlidingWindow, p.SlidingPattern = o.SlidingWindow, o.SlidingPattern
}

// gemmaConfig turns the common config.json into Gemma3ForCausalLM's.
func (m *Model) gemmaConfig(c map[string]any) {
	p := m.Params
	for _, k := range []string{"hidden_act", "max_window_layers", "use_sliding_window"} {
		delete(c, k) // Qwen3's
	}
	m.setKeys(c, map[string]any{
		"architectures":           []string{"Gemma3ForCausalLM"},
		"model_type":              modelfile.ArchGemma3Text,
		"attn_logit_softcapping":  nil,
		"cache_implementation":    "hybrid",
		"final_logit_softcapping": nil,
		"hidden_activation":       "gelu_pytorch_tanh",
		"layer_types":             p.layerTypes(),
		"query_pre_attn_scalar":   p.HeadDim,
		"rope_local_base_freq":    10000.0,
		"sliding_window":          p.SlidingWindow,
		"sliding_window_pattern":  p.SlidingPattern,
		"transformers_version":    "4.50.0.dev0",
	})
}

// gemmaEmbedScale is what gemma3_text multiplies the embeddings by.
func (p Params) gemmaEmbedScale() float64 {
	return float64(tensor.BF16ToF32(tensor.F32ToBF16(float32(math.Sqrt(float64(p.Hidden))))))
}

// gemmaLayers draws Gemma's layers with the magnitudes of init.go: the
// post-attention and post-feed-forward norms rescale each output to ρ
// times the (scaled) embedding on the content dimensions and write
// nothing to the reserved ones.
func (m *Model) gemmaLayers(sc scales,
	input func(name string, out int, gain float64) []float32,
	output func(name string, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
	fill func(n int, v float32) []float32,
) {
	p := m.Params
	qkGain := math.Sqrt(2)
	q, kv := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	out := sc.rho * initializerRange * math.Sqrt(float64(sc.content)/float64(p.Hidden)) * p.gemmaEmbedScale()
	postNorm := func(name string) {
		w := fill(p.Hidden, float32(out))
		for d := sc.content; d < p.Hidden; d++ {
			w[d] = 0
		}
		gemmaNormOffset(add(name, w, p.Hidden))
	}
	norm := func(name string, n int, v float64) { gemmaNormOffset(add(name, fill(n, float32(v)), n)) }
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		norm(pre+"input_layernorm.weight", p.Hidden, 1)
		input(pre+"self_attn.q_proj.weight", q, 1)
		input(pre+"self_attn.k_proj.weight", kv, 1)
		input(pre+"self_attn.v_proj.weight", kv, 1)
		output(pre+"self_attn.o_proj.weight", q, 1/math.Sqrt(float64(q)))
		norm(pre+"self_attn.q_norm.weight", p.HeadDim, qkGain)
		norm(pre+"self_attn.k_norm.weight", p.HeadDim, qkGain)
		postNorm(pre + "post_attention_layernorm.weight")
		norm(pre+"pre_feedforward_layernorm.weight", p.Hidden, 1)
		input(pre+"mlp.gate_proj.weight", p.Intermediate, 1)
		input(pre+"mlp.up_proj.weight", p.Intermediate, 1)
		output(pre+"mlp.down_proj.weight", p.Intermediate, 1/math.Sqrt(float64(p.Intermediate)))
		postNorm(pre + "post_feedforward_layernorm.weight")
	}
}

// gemmaNormOffset stores norm scales as Gemma does, w = scale − 1.
func gemmaNormOffset(w []float32) {
	for i := range w {
		w[i]--
	}
}
