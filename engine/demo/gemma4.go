package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"fusion/engine/modelfile"
)

// Gemma 4 demo models (gemma4_text) in the layout mlx-lm 0.32.2 saves
// (Gemma4ForCausalLM's config.json keys, weights as its sanitize leaves
// them): sliding and full layers (--sliding-window, --sliding-pattern),
// the full ones with k = v, a proportional RoPE on a quarter of the head
// and heads of --global-head-dim (default twice head_dim, as Gemma 4
// E2B/E4B's 512 beside 256); the last half of the layers sharing the KV of the last earlier
// layer of their kind (no k/v weights of their own, a double-wide MLP);
// per-layer inputs of gemma4PerLayer features; and, with --experts, the
// mixture beside the MLP in every layer (router.proj at 8 bits, stacked
// experts.switch_glu). Norm weights are plain scales (no 1 + w).

const (
	gemma4PerLayer = 16
	// gemma4Softcap is final_logit_softcapping: above the demo's ~40-nat
	// logits (the bias channel) so the cap bends them without flattening
	// the distribution (Gemma 4 ships 30 with logits near 0).
	gemma4Softcap = 100.0
	// gemma4Scalar is every layer's layer_scalar.
	gemma4Scalar = 0.875
)

// resolveGemma4 fills and checks Gemma 4's options.
func (o *Options) resolveGemma4() error {
	if err := o.checkGemma(); err != nil {
		return err
	}
	if o.Layers < 2 {
		return fmt.Errorf("demo: gemma4_text needs 2 layers or more (half of them share KV)")
	}
	if o.SlidingWindow == 0 {
		o.SlidingWindow = 512
	}
	if o.SlidingPattern == 0 {
		o.SlidingPattern = 2
	}
	if o.Layers/2 < o.SlidingPattern {
		return fmt.Errorf("demo: gemma4_text: the first half of the %d layers must hold both kinds (--sliding-pattern %d)", o.Layers, o.SlidingPattern)
	}
	if o.Experts != 0 || o.ExpertsPerTok != 0 || o.MoEIntermediate != 0 {
		return o.resolveMoE()
	}
	return nil
}

// gemma4 sets Gemma 4's hyperparameters.
func (p *Params) gemma4(o Options) {
	p.MaxPositions, p.RMSNormEps, p.RopeTheta = 131072, 1e-6, 10000
	p.RopeScaling = nil
	p.SlidingWindow, p.SlidingPattern = o.SlidingWindow, o.SlidingPattern
	p.GlobalHeadDim = o.GlobalHeadDim
}

// gemma4HeadDim is the head width of a layer of the kind given.
func (p Params) gemma4HeadDim(layerType string) int {
	if layerType == "full_attention" {
		return p.GlobalHeadDim
	}
	return p.HeadDim
}

// gemma4Shared is num_kv_shared_layers: the last half.
func (p Params) gemma4Shared() int { return p.Layers / 2 }

// gemma4Config is Gemma4ForCausalLM's config.json.
func (m *Model) gemma4Config(c map[string]any) map[string]any {
	p := m.Params
	for _, k := range []string{"hidden_act", "max_window_layers", "use_sliding_window", "rope_scaling", "rope_theta"} {
		delete(c, k)
	}
	keys := map[string]any{
		"architectures":               []string{"Gemma4ForCausalLM"},
		"model_type":                  modelfile.ArchGemma4Text,
		"attention_k_eq_v":            true,
		"final_logit_softcapping":     json.Number(strconv.FormatFloat(gemma4Softcap, 'f', 1, 64)), // a float, as transformers' Gemma4TextConfig insists (100 fails AutoConfig, so mlx_lm.convert and mlx_lm.load)
		"global_head_dim":             p.GlobalHeadDim,
		"hidden_activation":           "gelu_pytorch_tanh",
		"hidden_size_per_layer_input": gemma4PerLayer,
		"layer_types":                 p.layerTypes(),
		"num_global_key_value_heads":  p.KVHeads,
		"num_kv_shared_layers":        p.gemma4Shared(),
		"rope_parameters": map[string]any{
			"full_attention":    map[string]any{"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
			"sliding_attention": map[string]any{"rope_theta": 10000.0, "rope_type": "default"},
		},
		"sliding_window":             p.SlidingWindow,
		"transformers_version":       "5.5.0.dev0",
		"use_double_wide_mlp":        true,
		"vocab_size_per_layer_input": p.Vocab,
		"enable_moe_block":           p.Experts > 0,
	}
	if p.Experts > 0 {
		keys["num_experts"], keys["top_k_experts"], keys["moe_intermediate_size"] = p.Experts, p.ExpertsPerTok, p.MoEIntermediate
	}
	return m.setKeys(c, keys)
}

// gemma4Layers draws Gemma 4's layers with the magnitudes of init.go and
// gemmaLayers (the post norms rescale each output to ρ times the scaled
// embedding); the router's scale undoes mlx-lm's hidden^−½ so that its
// logits spread by ~1, the per-expert scales lie in [0.5, 1.5].
func (m *Model) gemma4Layers(sc scales, rng *rand.Rand,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
	fill func(n int, v float32) []float32,
) {
	p := m.Params
	out := sc.rho * initializerRange * math.Sqrt(float64(sc.content)/float64(p.Hidden)) * math.Sqrt(float64(p.Hidden))
	postNorm := func(name string) {
		w := fill(p.Hidden, float32(out))
		for d := sc.content; d < p.Hidden; d++ {
			w[d] = 0
		}
		add(name, w, p.Hidden)
	}
	input := func(name string, out int, gain float64) { add(name, inputs(1, out, gain), out, p.Hidden) }
	output := func(name string, in int, std float64) { add(name, outputs(1, in, std), p.Hidden, in) }
	all := p.Layers * gemma4PerLayer
	pl := make([]float32, p.Vocab*all)
	for i := range len(m.Tokenizer.Tokens) * all {
		pl[i] = float32(rng.NormFloat64() / math.Sqrt(gemma4PerLayer))
	}
	add("model.embed_tokens_per_layer.weight", pl, p.Vocab, all)
	input("model.per_layer_model_projection.weight", all, 1)
	add("model.per_layer_projection_norm.weight", fill(gemma4PerLayer, 1), gemma4PerLayer)
	types := p.layerTypes()
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		shared := l >= p.Layers-p.gemma4Shared()
		// Full layers are global_head_dim wide. Gemma 4's attention scale
		// is 1: the q/k norms carry head_dim^−½ between them, besides
		// init.go's gain of √2 on each.
		hd := p.gemma4HeadDim(types[l])
		qkGain := math.Sqrt(2) * math.Pow(float64(hd), -0.25)
		q, kv := p.Heads*hd, p.KVHeads*hd
		add(pre+"input_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		input(pre+"self_attn.q_proj.weight", q, 1)
		add(pre+"self_attn.q_norm.weight", fill(hd, float32(qkGain)), hd)
		if !shared {
			input(pre+"self_attn.k_proj.weight", kv, 1)
			if types[l] == "sliding_attention" {
				input(pre+"self_attn.v_proj.weight", kv, 1)
			}
			add(pre+"self_attn.k_norm.weight", fill(hd, float32(qkGain)), hd)
		}
		output(pre+"self_attn.o_proj.weight", q, 1/math.Sqrt(float64(q)))
		postNorm(pre + "post_attention_layernorm.weight")
		add(pre+"pre_feedforward_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		inter := p.Intermediate
		if shared {
			inter *= 2
		}
		input(pre+"mlp.gate_proj.weight", inter, 1)
		input(pre+"mlp.up_proj.weight", inter, 1)
		output(pre+"mlp.down_proj.weight", inter, 1/math.Sqrt(float64(inter)))
		if e, in := p.Experts, p.MoEIntermediate; e > 0 {
			input(pre+"router.proj.weight", e, 1)
			add(pre+"router.scale", fill(p.Hidden, float32(math.Sqrt(float64(p.Hidden)))), p.Hidden)
			ps := make([]float32, e)
			for i := range ps {
				ps[i] = float32(0.5 + rng.Float64())
			}
			add(pre+"router.per_expert_scale", ps, e)
			add(pre+"experts.switch_glu.gate_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
			add(pre+"experts.switch_glu.up_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
			add(pre+"experts.switch_glu.down_proj.weight", outputs(e, in, 1/math.Sqrt(float64(in))), e, p.Hidden, in)
			add(pre+"pre_feedforward_layernorm_2.weight", fill(p.Hidden, 1), p.Hidden)
			add(pre+"post_feedforward_layernorm_1.weight", fill(p.Hidden, 1), p.Hidden)
			add(pre+"post_feedforward_layernorm_2.weight", fill(p.Hidden, 1), p.Hidden)
		}
		postNorm(pre + "post_feedforward_layernorm.weight")
		input(pre+"per_layer_input_gate.weight", gemma4PerLayer, 1)
		add(pre+"per_layer_projection.weight", outputs(1, gemma4PerLayer, 1/math.Sqrt(gemma4PerLayer)), p.Hidden, gemma4PerLayer)
		postNorm(pre + "post_per_layer_input_norm.weight")
		add(pre+"layer_scalar", fill(1, gemma4Scalar), 1)
	}
}
