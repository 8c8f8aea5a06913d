package demo

import (
	"fmt"
	"math"
	"math/rand/v2"

	"fusion/engine/modelfile"
)

// DeepSeek-V3 demo models (deepseek_v3), in the layout mlx-lm 0.32.2
// saves: DeepSeek-V3's config.json keys (yarn ×40 RoPE with mscale_all_dim
// 1, routed_scaling_factor 2.5, noaux_tc), multi-head latent attention
// with a q LoRA, and kv_b_proj already split into the per-head
// self_attn.embed_q [heads, kv_lora_rank, qk_nope_head_dim] and
// self_attn.unembed_out [heads, v_head_dim, kv_lora_rank] that mlx-lm's
// sanitize makes (and mlx_lm.convert writes). Layer 0 is dense
// (first_k_dense_replace 1); the others have a sigmoid-routed mixture of
// Experts experts in groups of two (n_group Experts/2, topk_group half of
// them) and one shared expert. --head-dim is qk_nope_head_dim and
// v_head_dim.

// Latent attention sizes of the demo (DeepSeek-V3: 1536, 512, 64).
const (
	deepseekQLora  = 64
	deepseekKVLora = 64
	deepseekRope   = 32
)

// resolveDeepseek checks what deepseek_v3, glm4_moe and the Gated
// DeltaNet families allow.
func (o *Options) resolveDeepseek() error {
	if o.Arch != modelfile.ArchDeepseekV3 && o.Arch != modelfile.ArchGlm4MoE && !hybrid(o.Arch) {
		return nil
	}
	switch {
	case o.Format == FormatGGUF:
		return fmt.Errorf("demo: %s demos are written as safetensors only", o.Arch)
	case o.StopAfter != 0 || o.SlidingWindow != 0 || o.SlidingPattern != 0:
		return fmt.Errorf("demo: --stop-after and sliding windows are not for %s", o.Arch)
	case o.Untied:
		return fmt.Errorf("demo: %s is always untied", o.Arch)
	}
	return nil
}

// deepseek sets DeepSeek-V3's hyperparameters.
func (p *Params) deepseek() {
	p.MaxPositions, p.RMSNormEps, p.RopeTheta = 163840, 1e-6, 10000
	p.KVHeads = p.Heads // num_key_value_heads: MLA has no KV heads of its own
	p.RopeScaling = map[string]any{"beta_fast": 32.0, "beta_slow": 1.0, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
		"original_max_position_embeddings": 4096, "type": "yarn"}
	p.TieEmbeddings = false
}

// deepseekGroups is n_group and topk_group: groups of two experts, half
// of them kept.
func (p Params) deepseekGroups() (groups, kept int) {
	groups = max(p.Experts/2, 1)
	return groups, max(groups/2, 1)
}

// deepseekConfig is DeepseekV3ForCausalLM's config.json (DeepSeek-V3's
// keys).
func (m *Model) deepseekConfig(c map[string]any) map[string]any {
	p := m.Params
	groups, kept := p.deepseekGroups()
	delete(c, "head_dim")
	delete(c, "max_window_layers")
	delete(c, "sliding_window")
	delete(c, "use_sliding_window")
	return m.setKeys(c, map[string]any{
		"architectures":            []string{"DeepseekV3ForCausalLM"},
		"model_type":               modelfile.ArchDeepseekV3,
		"num_key_value_heads":      p.Heads,
		"first_k_dense_replace":    1,
		"kv_lora_rank":             deepseekKVLora,
		"moe_intermediate_size":    p.MoEIntermediate,
		"moe_layer_freq":           1,
		"n_group":                  groups,
		"n_routed_experts":         p.Experts,
		"n_shared_experts":         1,
		"norm_topk_prob":           true,
		"num_experts_per_tok":      p.ExpertsPerTok,
		"num_nextn_predict_layers": 1,
		"q_lora_rank":              deepseekQLora,
		"qk_nope_head_dim":         p.HeadDim,
		"qk_rope_head_dim":         deepseekRope,
		"routed_scaling_factor":    2.5,
		"scoring_func":             "sigmoid",
		"topk_group":               kept,
		"topk_method":              "noaux_tc",
		"v_head_dim":               p.HeadDim,
		"transformers_version":     "4.46.3",
	})
}

// deepseekLayers draws DeepSeek-V3's layers with the magnitudes of
// init.go: the low-rank projections at unit gain before their norms, the
// query and key parts at qkGain, and each mixture (weights summing to
// ~routed_scaling_factor, plus the shared expert) scaled down to one
// MLP's size.
func (m *Model) deepseekLayers(sc scales, rng *rand.Rand,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
	fill func(n int, v float32) []float32,
) {
	p := m.Params
	qkGain := math.Sqrt(2)
	h, nope, v := p.Heads, p.HeadDim, p.HeadDim
	qhd := nope + deepseekRope
	normal := normalFunc(rng)
	oStd := sc.rho * initializerRange / (0.7 * math.Sqrt(float64(h*v)))
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		a := pre + "self_attn."
		add(pre+"input_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		add(a+"q_a_proj.weight", inputs(1, deepseekQLora, 1), deepseekQLora, p.Hidden)
		add(a+"q_a_layernorm.weight", fill(deepseekQLora, 1), deepseekQLora)
		add(a+"q_b_proj.weight", normal(h*qhd*deepseekQLora, qkGain/math.Sqrt(deepseekQLora)), h*qhd, deepseekQLora)
		add(a+"kv_a_proj_with_mqa.weight", inputs(1, deepseekKVLora+deepseekRope, qkGain), deepseekKVLora+deepseekRope, p.Hidden)
		add(a+"kv_a_layernorm.weight", fill(deepseekKVLora, 1), deepseekKVLora)
		add(a+"embed_q.weight", normal(h*deepseekKVLora*nope, qkGain/math.Sqrt(deepseekKVLora)), h, deepseekKVLora, nope)
		add(a+"unembed_out.weight", normal(h*v*deepseekKVLora, 1/math.Sqrt(deepseekKVLora)), h, v, deepseekKVLora)
		add(a+"o_proj.weight", outputs(1, h*v, oStd), p.Hidden, h*v)
		add(pre+"post_attention_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		if l == 0 { // first_k_dense_replace
			denseMLP(p, sc, pre, inputs, outputs, add)
			continue
		}
		sigmoidMoE(p, sc, pre, normal, inputs, outputs, add)
	}
}

// sigmoidMoE draws one layer's DeepSeek-V3-style mixture (deepseek_v3,
// glm4_moe): a router at unit gain and a correction bias around 0, the
// routed experts and one shared expert, the outputs scaled so that the
// mixture (weights summing to ~routed_scaling_factor, plus the shared
// expert) stays one MLP's size.
func sigmoidMoE(p Params, sc scales, pre string,
	normal func(n int, std float64) []float32,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
) {
	e, in := p.Experts, p.MoEIntermediate
	std := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(in)) * (routedScaling + 1))
	add(pre+"mlp.gate.weight", inputs(1, e, 1), e, p.Hidden)
	add(pre+"mlp.gate.e_score_correction_bias", normal(e, 0.1), e)
	add(pre+"mlp.switch_mlp.gate_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
	add(pre+"mlp.switch_mlp.up_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
	add(pre+"mlp.switch_mlp.down_proj.weight", outputs(e, in, std), e, p.Hidden, in)
	add(pre+"mlp.shared_experts.gate_proj.weight", inputs(1, in, 1), in, p.Hidden)
	add(pre+"mlp.shared_experts.up_proj.weight", inputs(1, in, 1), in, p.Hidden)
	add(pre+"mlp.shared_experts.down_proj.weight", outputs(1, in, std), p.Hidden, in)
}

// routedScaling is the demos' routed_scaling_factor (DeepSeek-V3's and
// GLM-4.5's).
const routedScaling = 2.5

// GLM-4.5 demo models (glm4_moe): GLM-4.5-Air's config.json keys (head_dim
// explicit, partial_rotary_factor 0.5, rope_theta 1e6, q/k/v biases, no
// q/k norms, n_group 1), a dense first layer (first_k_dense_replace 1),
// then in every layer Experts sigmoid-routed experts and one shared
// expert, routed_scaling_factor 2.5.

// glm sets GLM-4.5's hyperparameters.
func (p *Params) glm() {
	p.MaxPositions, p.RMSNormEps, p.RopeTheta = 131072, 1e-5, 1000000
	p.RopeScaling = nil
	p.TieEmbeddings = false
}

// glmConfig is Glm4MoeForCausalLM's config.json.
func (m *Model) glmConfig(c map[string]any) map[string]any {
	p := m.Params
	delete(c, "max_window_layers")
	delete(c, "sliding_window")
	delete(c, "use_sliding_window")
	return m.setKeys(c, map[string]any{
		"architectures":            []string{"Glm4MoeForCausalLM"},
		"model_type":               modelfile.ArchGlm4MoE,
		"attention_bias":           true,
		"first_k_dense_replace":    1,
		"moe_intermediate_size":    p.MoEIntermediate,
		"n_group":                  1,
		"n_routed_experts":         p.Experts,
		"n_shared_experts":         1,
		"norm_topk_prob":           true,
		"num_experts_per_tok":      p.ExpertsPerTok,
		"num_nextn_predict_layers": 1,
		"partial_rotary_factor":    0.5,
		"routed_scaling_factor":    routedScaling,
		"topk_group":               1,
		"use_qk_norm":              false,
		"transformers_version":     "4.54.0",
	})
}

// glmLayers draws GLM-4.5's layers: Llama's attention with q/k/v biases
// (spread by 0.1), then a dense MLP in layer 0 and the sigmoid mixture in
// the others.
func (m *Model) glmLayers(sc scales, rng *rand.Rand,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
	fill func(n int, v float32) []float32,
) {
	p := m.Params
	q := p.Heads * p.HeadDim
	normal := normalFunc(rng)
	oStd := sc.rho * initializerRange / (0.7 * math.Sqrt(float64(q)))
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		add(pre+"input_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		biasedQKV(p, pre, normal, inputs, add)
		add(pre+"self_attn.o_proj.weight", outputs(1, q, oStd), p.Hidden, q)
		add(pre+"post_attention_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		if l == 0 {
			denseMLP(p, sc, pre, inputs, outputs, add)
			continue
		}
		sigmoidMoE(p, sc, pre, normal, inputs, outputs, add)
	}
}

// normalFunc draws n values of N(0, std²) from rng.
func normalFunc(rng *rand.Rand) func(n int, std float64) []float32 {
	return func(n int, std float64) []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
		}
		return d
	}
}

// biasedQKV draws q, k and v projections with biases spread by 0.1 (q
// and k at √2 gain, as init.go's).
func biasedQKV(p Params, pre string, normal func(n int, std float64) []float32,
	inputs func(n, out int, gain float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
) {
	qkGain := math.Sqrt(2)
	q, kv := p.Heads*p.HeadDim, p.KVHeads*p.HeadDim
	for _, proj := range []struct {
		name string
		out  int
		gain float64
	}{{"q_proj", q, qkGain}, {"k_proj", kv, qkGain}, {"v_proj", kv, 1}} {
		add(pre+"self_attn."+proj.name+".weight", inputs(1, proj.out, proj.gain), proj.out, p.Hidden)
		add(pre+"self_attn."+proj.name+".bias", normal(proj.out, 0.1), proj.out)
	}
}

// denseMLP draws a dense SwiGLU MLP of intermediate_size (a mixture
// family's first layers), scaled as init.go's.
func denseMLP(p Params, sc scales, pre string,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
) {
	std := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(p.Intermediate)))
	add(pre+"mlp.gate_proj.weight", inputs(1, p.Intermediate, 1), p.Intermediate, p.Hidden)
	add(pre+"mlp.up_proj.weight", inputs(1, p.Intermediate, 1), p.Intermediate, p.Hidden)
	add(pre+"mlp.down_proj.weight", outputs(1, p.Intermediate, std), p.Hidden, p.Intermediate)
}
