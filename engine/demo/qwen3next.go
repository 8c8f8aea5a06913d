package demo

import (
	"fmt"
	"math"
	"math/rand/v2"

	"fusion/engine/modelfile"
)

// Qwen3-Next demo models (qwen3_next), in the layout mlx-lm 0.32.2 saves
// (Qwen3-Next-80B-A3B's config.json keys): every fourth layer gated full
// attention (q_proj yields [query | gate] per head, partial rotary 0.25),
// the others Gated DeltaNet with --kv-heads key heads and --heads value
// heads of --head-dim features, a 4-tap convolution (conv1d.weight
// [channels, 4, 1], as mlx-lm's sanitize leaves it) and in_proj_qkvz /
// in_proj_ba grouped by key head; every layer a softmax mixture of
// Experts experts plus a shared expert of the same width gated by
// shared_expert_gate. Norms are written with mlx-lm's +1 already in them.

const (
	qwen3NextConv     = 4
	qwen3NextInterval = 4
)

// Qwen3.5 demo models (qwen3_5, qwen3_5_moe) are the same layers with
// the DeltaNet's projections unfused (in_proj_qkv [q | k | v], in_proj_z,
// in_proj_b, in_proj_a), the text model's keys in text_config (RoPE in
// rope_parameters) and every weight under "language_model.", as mlx-lm
// saves Qwen3_5ForConditionalGeneration; qwen3_5 has a dense MLP in
// every layer, qwen3_5_moe the mixture with its shared expert.

// hybrid reports whether arch is one of the Gated DeltaNet families.
func hybrid(arch string) bool {
	return arch == modelfile.ArchQwen3Next || arch == modelfile.ArchQwen35 || arch == modelfile.ArchQwen35MoE
}

// qwen3Next sets Qwen3-Next's hyperparameters.
func (p *Params) qwen3Next() {
	p.MaxPositions, p.RMSNormEps, p.RopeTheta = 262144, 1e-6, 10000000
	p.RopeScaling = nil
	p.TieEmbeddings = false
	p.PartialRotary = 0.25
}

// qwen3NextConfig is Qwen3NextForCausalLM's config.json.
func (m *Model) qwen3NextConfig(c map[string]any) map[string]any {
	p := m.Params
	delete(c, "max_window_layers")
	delete(c, "sliding_window")
	delete(c, "use_sliding_window")
	if p.Arch != modelfile.ArchQwen3Next {
		return m.qwen35Config(c)
	}
	return m.setKeys(m.setKeys(c, p.deltaNetKeys()), map[string]any{
		"architectures":                   []string{"Qwen3NextForCausalLM"},
		"model_type":                      modelfile.ArchQwen3Next,
		"decoder_sparse_step":             p.SparseStep,
		"mlp_only_layers":                 []int{},
		"moe_intermediate_size":           p.MoEIntermediate,
		"norm_topk_prob":                  true,
		"num_experts":                     p.Experts,
		"num_experts_per_tok":             p.ExpertsPerTok,
		"output_router_logits":            false,
		"partial_rotary_factor":           p.PartialRotary,
		"router_aux_loss_coef":            0.001,
		"shared_expert_intermediate_size": p.MoEIntermediate,
		"transformers_version":            "4.57.0.dev0",
	})
}

// deltaNetKeys are the Gated DeltaNet's config keys: --kv-heads key
// heads and --heads value heads of --head-dim features.
func (p Params) deltaNetKeys() map[string]any {
	return map[string]any{
		"full_attention_interval": qwen3NextInterval,
		"linear_conv_kernel_dim":  qwen3NextConv,
		"linear_key_head_dim":     p.HeadDim,
		"linear_num_key_heads":    p.KVHeads,
		"linear_num_value_heads":  p.Heads,
		"linear_value_head_dim":   p.HeadDim,
	}
}

// qwen35Config is Qwen3_5(Moe)ForConditionalGeneration's config.json: the
// text model's keys in text_config, quantization and dtype at the top.
func (m *Model) qwen35Config(c map[string]any) map[string]any {
	p := m.Params
	moe := p.Arch == modelfile.ArchQwen35MoE
	delete(c, "rope_scaling")
	delete(c, "rope_theta")
	text := m.setKeys(m.setKeys(c, p.deltaNetKeys()), map[string]any{
		"model_type": p.Arch + "_text",
		"rope_parameters": map[string]any{"rope_type": "default", "mrope_interleaved": true, "mrope_section": []int{11, 11, 10},
			"rope_theta": p.RopeTheta, "partial_rotary_factor": p.PartialRotary},
	})
	arch := "Qwen3_5ForConditionalGeneration"
	if moe {
		arch = "Qwen3_5MoeForConditionalGeneration"
		text["num_experts"], text["num_experts_per_tok"] = p.Experts, p.ExpertsPerTok
		text["moe_intermediate_size"], text["shared_expert_intermediate_size"] = p.MoEIntermediate, p.MoEIntermediate
		text["norm_topk_prob"] = true
	}
	top := map[string]any{
		"architectures":        []string{arch},
		"model_type":           p.Arch,
		"tie_word_embeddings":  false,
		"torch_dtype":          c["torch_dtype"],
		"transformers_version": "4.57.0.dev0",
	}
	return wrapText(top, text)
}

// qwen3NextLayers draws Qwen3-Next's layers with the magnitudes of
// init.go; the DeltaNet's decays A = exp(A_log) lie in [0.5, 4] and its
// dt_bias around 0.5, so the state neither forgets at once nor saturates.
func (m *Model) qwen3NextLayers(sc scales, rng *rand.Rand,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
	fill func(n int, v float32) []float32,
) {
	p := m.Params
	qkGain := math.Sqrt(2)
	normal := normalFunc(rng)
	nk, nv, d := p.KVHeads, p.Heads, p.HeadDim
	kd, vd := nk*d, nv*d
	conv := 2*kd + vd
	oStd := sc.rho * initializerRange / (0.7 * math.Sqrt(float64(nv*d)))
	downStd := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(p.Intermediate)))
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		add(pre+"input_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		if (l+1)%qwen3NextInterval != 0 {
			a := pre + "linear_attn."
			add(a+"A_log", m.aLog(rng, nv), nv)
			add(a+"conv1d.weight", normal(conv*qwen3NextConv, 1/math.Sqrt(qwen3NextConv)), conv, qwen3NextConv, 1)
			dt := normal(nv, 0.3)
			for i := range dt {
				dt[i] += 0.5
			}
			add(a+"dt_bias", dt, nv)
			if p.Arch == modelfile.ArchQwen3Next {
				add(a+"in_proj_ba.weight", inputs(1, 2*nv, 1), 2*nv, p.Hidden)
				add(a+"in_proj_qkvz.weight", inputs(1, 2*kd+2*vd, 1), 2*kd+2*vd, p.Hidden)
			} else {
				add(a+"in_proj_a.weight", inputs(1, nv, 1), nv, p.Hidden)
				add(a+"in_proj_b.weight", inputs(1, nv, 1), nv, p.Hidden)
				add(a+"in_proj_qkv.weight", inputs(1, 2*kd+vd, 1), 2*kd+vd, p.Hidden)
				add(a+"in_proj_z.weight", inputs(1, vd, 1), vd, p.Hidden)
			}
			add(a+"norm.weight", fill(d, 1), d)
			add(a+"out_proj.weight", outputs(1, vd, oStd), p.Hidden, vd)
		} else {
			a := pre + "self_attn."
			q, kv := p.Heads*d, p.KVHeads*d
			add(a+"q_proj.weight", inputs(1, 2*q, qkGain), 2*q, p.Hidden)
			add(a+"k_proj.weight", inputs(1, kv, qkGain), kv, p.Hidden)
			add(a+"v_proj.weight", inputs(1, kv, 1), kv, p.Hidden)
			add(a+"o_proj.weight", outputs(1, q, oStd), p.Hidden, q)
			add(a+"q_norm.weight", fill(d, float32(qkGain)), d)
			add(a+"k_norm.weight", fill(d, float32(qkGain)), d)
		}
		add(pre+"post_attention_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		if p.Arch == modelfile.ArchQwen35 {
			add(pre+"mlp.gate_proj.weight", inputs(1, p.Intermediate, 1), p.Intermediate, p.Hidden)
			add(pre+"mlp.up_proj.weight", inputs(1, p.Intermediate, 1), p.Intermediate, p.Hidden)
			add(pre+"mlp.down_proj.weight", outputs(1, p.Intermediate, downStd), p.Hidden, p.Intermediate)
			continue
		}
		// The routed mixture (weights summing to 1) and the shared expert
		// (gated to about half) together stay one MLP's size.
		e, in := p.Experts, p.MoEIntermediate
		std := sc.rho * initializerRange / (0.6 * math.Sqrt(float64(in)) * 1.5)
		add(pre+"mlp.gate.weight", inputs(1, e, 1), e, p.Hidden)
		add(pre+"mlp.switch_mlp.gate_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
		add(pre+"mlp.switch_mlp.up_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
		add(pre+"mlp.switch_mlp.down_proj.weight", outputs(e, in, std), e, p.Hidden, in)
		add(pre+"mlp.shared_expert.gate_proj.weight", inputs(1, in, 1), in, p.Hidden)
		add(pre+"mlp.shared_expert.up_proj.weight", inputs(1, in, 1), in, p.Hidden)
		add(pre+"mlp.shared_expert.down_proj.weight", outputs(1, in, std), p.Hidden, in)
		add(pre+"mlp.shared_expert_gate.weight", inputs(1, 1, 1), 1, p.Hidden)
	}
}

// aLog draws log(A) with A uniform in [0.5, 4].
func (m *Model) aLog(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.Log(0.5 + 3.5*rng.Float64()))
	}
	return out
}
