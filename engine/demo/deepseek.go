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

// resolveDeepseek checks what deepseek_v3 allows.
func (o *Options) resolveDeepseek() error {
	if o.Arch != modelfile.ArchDeepseekV3 {
		return nil
	}
	switch {
	case o.Format == FormatGGUF:
		return fmt.Errorf("demo: deepseek_v3 demos are written as safetensors only")
	case o.StopAfter != 0 || o.SlidingWindow != 0 || o.SlidingPattern != 0:
		return fmt.Errorf("demo: --stop-after and sliding windows are not for deepseek_v3")
	case o.Untied:
		return fmt.Errorf("demo: deepseek_v3 is always untied")
	}
	return nil
}

// deepseek sets DeepSeek-V3's hyperparameters.
func (p *Params) deepseek() {
	p.MaxPositions, p.RMSNormEps, p.RopeTheta = 163840, 1e-6, 10000
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
	normal := func(n int, std float64) []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * std)
		}
		return d
	}
	oStd := sc.rho * initializerRange / (0.7 * math.Sqrt(float64(h*v)))
	downStd := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(p.Intermediate)))
	e, in := p.Experts, p.MoEIntermediate
	expertStd := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(in)) * (2.5 + 1))
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
			add(pre+"mlp.gate_proj.weight", inputs(1, p.Intermediate, 1), p.Intermediate, p.Hidden)
			add(pre+"mlp.up_proj.weight", inputs(1, p.Intermediate, 1), p.Intermediate, p.Hidden)
			add(pre+"mlp.down_proj.weight", outputs(1, p.Intermediate, downStd), p.Hidden, p.Intermediate)
			continue
		}
		add(pre+"mlp.gate.weight", inputs(1, e, 1), e, p.Hidden)
		add(pre+"mlp.gate.e_score_correction_bias", normal(e, 0.1), e)
		add(pre+"mlp.switch_mlp.gate_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
		add(pre+"mlp.switch_mlp.up_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
		add(pre+"mlp.switch_mlp.down_proj.weight", outputs(e, in, expertStd), e, p.Hidden, in)
		add(pre+"mlp.shared_experts.gate_proj.weight", inputs(1, in, 1), in, p.Hidden)
		add(pre+"mlp.shared_experts.up_proj.weight", inputs(1, in, 1), in, p.Hidden)
		add(pre+"mlp.shared_experts.down_proj.weight", outputs(1, in, expertStd), p.Hidden, in)
	}
}
