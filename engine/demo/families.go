package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"fusion/engine/modelfile"
)

// Phi-3 and Mistral demo models, in the layouts mlx-lm reads and writes:
//
//   - phi3: Phi-4-mini's config.json keys (partial_rotary_factor 0.75,
//     longrope with short and long factors, original_max_position_embeddings
//     4096 of 131072), and its fused self_attn.qkv_proj [q | k | v] and
//     mlp.gate_up_proj [gate | up];
//   - mistral: MistralForCausalLM's keys (Mistral 7B v0.3 / Nemo: an
//     explicit head_dim, rope_theta 1e6, untied lm_head, sliding_window
//     null unless layers slide);
//   - mistral3: Mistral Small 3.1's Mistral3ForConditionalGeneration,
//     the mistral text model in text_config and its weights under
//     "language_model." as mlx-lm saves them, beside a (tiny, random)
//     vision tower and projector that the text model does not use;
//   - ministral3: Ministral 3's, the same with a ministral3 text_config
//     (transformers v5's rope_parameters: yarn and the query scale's
//     llama_4_scaling_beta 0.1, over ministral3QueryEvery positions so
//     that short prompts cross several of its steps), tied unless
//     --untied as the 3B is.

// resolveFamily checks what phi3, the mistral families and gpt_oss
// allow.
func (o *Options) resolveFamily() error {
	phi3 := o.Arch == modelfile.ArchPhi3
	mistral := o.Arch == modelfile.ArchMistral || o.Arch == modelfile.ArchMistral3 || o.Arch == modelfile.ArchMinistral3
	oss := o.Arch == modelfile.ArchGptOss
	switch {
	case o.PartialRotary != 0 && !phi3:
		return fmt.Errorf("demo: --partial-rotary is only for phi3")
	case !phi3 && !mistral && !oss:
		return nil
	case o.StopAfter != 0 && (phi3 || oss || o.Arch == modelfile.ArchMinistral3 || o.SlidingWindow != 0):
		return fmt.Errorf("demo: --stop-after is not supported for %s (or with sliding windows)", o.Arch)
	case oss && o.SlidingPattern != 0 && o.SlidingPattern != 2:
		return fmt.Errorf("demo: gpt_oss alternates sliding and full layers (--sliding-pattern 2)")
	case o.Format == FormatGGUF && !oss:
		return fmt.Errorf("demo: %s demos are written as safetensors only", o.Arch)
	case phi3 && o.HeadDim != 0 && o.HeadDim*o.Heads != o.Hidden:
		return fmt.Errorf("demo: phi3's head dim is --hidden / --heads")
	case phi3 && (o.SlidingWindow != 0 || o.SlidingPattern != 0):
		return fmt.Errorf("demo: a sliding window is not for phi3")
	case o.SlidingWindow < 0 || o.SlidingPattern < 0:
		return fmt.Errorf("demo: sliding window and pattern must be positive")
	case o.SlidingPattern != 0 && o.SlidingWindow == 0:
		return fmt.Errorf("demo: --sliding-pattern needs --sliding-window")
	}
	if phi3 {
		if o.PartialRotary == 0 {
			o.PartialRotary = 0.75
		}
		if !(o.PartialRotary > 0 && o.PartialRotary <= 1) {
			return fmt.Errorf("demo: --partial-rotary %v is outside (0, 1]", o.PartialRotary)
		}
	}
	if oss {
		if o.SlidingWindow == 0 {
			o.SlidingWindow = 128
		}
		o.SlidingPattern = 2
		if o.Untied {
			return fmt.Errorf("demo: gpt_oss is always untied")
		}
	}
	if o.SlidingWindow != 0 && o.SlidingPattern == 0 {
		o.SlidingPattern = 4
	}
	return nil
}

// family sets the hyperparameters of phi3 and the mistral families.
func (p *Params) family(o Options) {
	switch p.Arch {
	case modelfile.ArchPhi3:
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 131072, 1e-5, 10000
		p.PartialRotary = o.PartialRotary
		p.RopeScaling = phi3LongRope(p.rotaryDims() / 2)
	case modelfile.ArchMistral, modelfile.ArchMistral3:
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 32768, 1e-5, 1000000
		p.TieEmbeddings = false
		p.SlidingWindow, p.SlidingPattern = o.SlidingWindow, o.SlidingPattern
	case modelfile.ArchMinistral3:
		// Ministral 3's rope_parameters (3B: yarn ×16 over 16384
		// positions), over ministral3QueryEvery positions.
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 262144, 1e-5, 1000000
		p.RopeScaling = map[string]any{"beta_fast": 32.0, "beta_slow": 1.0, "factor": 16.0,
			"llama_4_scaling_beta": 0.1, "mscale": 1.0, "mscale_all_dim": 1.0,
			"original_max_position_embeddings": ministral3QueryEvery, "rope_theta": p.RopeTheta,
			"rope_type": "yarn", "type": "yarn"}
		p.SlidingWindow, p.SlidingPattern = o.SlidingWindow, o.SlidingPattern
	case modelfile.ArchGptOss:
		// gpt-oss-20b's RoPE: yarn ×32 over 4096 positions.
		p.MaxPositions, p.RMSNormEps, p.RopeTheta = 131072, 1e-5, 150000
		p.RopeScaling = map[string]any{"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
			"original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}
		p.TieEmbeddings = false
		p.SlidingWindow, p.SlidingPattern = o.SlidingWindow, o.SlidingPattern
		p.Intermediate = o.MoEIntermediate // the experts' width is intermediate_size
	}
}

// ministral3QueryEvery is the demo ministral3's
// original_max_position_embeddings: its queries' scale steps up every 16
// positions (Ministral 3: 16384), so that the tests' prompts of a few
// dozen to a few hundred tokens see several steps.
const ministral3QueryEvery = 16

// rotaryDims is phi3's int(head_dim · partial_rotary_factor).
func (p Params) rotaryDims() int { return int(float64(p.HeadDim) * p.PartialRotary) }

// phi3LongRope is a longrope block shaped like Phi-3.5's: long factors
// growing from 1 to ~20 over the frequencies (slow ones stretched most),
// short factors near 1, three decimals as the checkpoints write them.
func phi3LongRope(n int) map[string]any {
	long, short := make([]float64, n), make([]float64, n)
	for i := range n {
		x := float64(i) / float64(max(n-1, 1))
		long[i] = math.Round((1+19*x*x)*1000) / 1000
		short[i] = math.Round((1+0.1*x)*1000) / 1000
	}
	return map[string]any{"type": "longrope", "long_factor": long, "short_factor": short}
}

// familyConfig turns the common config.json into phi3's or mistral's,
// and wraps mistral3's text config.
func (m *Model) familyConfig(c map[string]any) map[string]any {
	p := m.Params
	for _, k := range []string{"max_window_layers", "use_sliding_window", "head_dim", "mlp_bias", "pretraining_tp"} {
		if k != "head_dim" || p.Arch == modelfile.ArchPhi3 {
			delete(c, k)
		}
	}
	switch p.Arch {
	case modelfile.ArchGptOss:
		return m.gptOssConfig(c)
	case modelfile.ArchPhi3:
		return m.setKeys(c, map[string]any{
			"architectures":                    []string{"Phi3ForCausalLM"},
			"model_type":                       modelfile.ArchPhi3,
			"embd_pdrop":                       0.0,
			"resid_pdrop":                      0.0,
			"lm_head_bias":                     false,
			"original_max_position_embeddings": 4096,
			"partial_rotary_factor":            p.PartialRotary,
			"sliding_window":                   262144,
			"transformers_version":             "4.45.0",
		})
	}
	c["architectures"] = []string{"MistralForCausalLM"}
	c["model_type"] = modelfile.ArchMistral
	c["sliding_window"] = nil
	c["transformers_version"] = "4.42.0.dev0"
	if p.SlidingWindow > 0 {
		c["sliding_window"], c["layer_types"] = p.SlidingWindow, p.layerTypes()
	}
	if p.Arch == modelfile.ArchMinistral3 {
		// transformers v5: RoPE and the query scale in rope_parameters.
		c["model_type"] = modelfile.ArchMinistral3
		c["transformers_version"] = "5.0.0.dev0"
		c["rope_parameters"] = p.RopeScaling
		delete(c, "rope_scaling")
		delete(c, "rope_theta")
	}
	if p.Arch != modelfile.ArchMistral3 && p.Arch != modelfile.ArchMinistral3 {
		return c
	}
	top := map[string]any{
		"architectures":             []string{"Mistral3ForConditionalGeneration"},
		"model_type":                modelfile.ArchMistral3,
		"image_token_index":         10,
		"multimodal_projector_bias": false,
		"projector_hidden_act":      "gelu",
		"spatial_merge_size":        2,
		"vision_feature_layer":      -1,
		"torch_dtype":               c["torch_dtype"],
		"transformers_version":      "4.50.0.dev0",
		"vision_config": map[string]any{
			"model_type": "pixtral", "hidden_size": visionHidden, "num_attention_heads": 1, "num_hidden_layers": 0,
			"intermediate_size": visionHidden, "head_dim": visionHidden, "image_size": 16, "patch_size": visionPatch,
			"num_channels": 3, "rope_theta": 10000.0, "hidden_act": "silu",
		},
	}
	if p.Arch == modelfile.ArchMinistral3 {
		top["transformers_version"] = "5.0.0.dev0"
	}
	return wrapText(top, c)
}

// The demo's vision tower: one patch convolution and the projector's
// norm, enough to show a loader passing over them.
const visionHidden, visionPatch = 16, 4

// visionTensors adds mistral3's unused vision weights.
func (m *Model) visionTensors(add func(name string, data []float32, shape ...int) []float32) {
	conv := make([]float32, visionHidden*3*visionPatch*visionPatch)
	for i := range conv {
		conv[i] = float32(i%7) / 64
	}
	add("vision_tower.patch_conv.weight", conv, visionHidden, 3, visionPatch, visionPatch)
	norm := make([]float32, visionHidden)
	for i := range norm {
		norm[i] = 1
	}
	add("multi_modal_projector.norm.weight", norm, visionHidden)
}

// fusePhi3 replaces each layer's q, k, v and gate, up projections with
// Phi-3's fused qkv_proj and gate_up_proj (rows concatenated in that
// order), keeping the tensors' order otherwise.
func (m *Model) fusePhi3() {
	byName := map[string]Tensor{}
	for _, t := range m.Tensors {
		byName[t.Name] = t
	}
	fuse := func(parts ...string) Tensor {
		var out Tensor
		rows := int64(0)
		for _, n := range parts {
			t := byName[n]
			out.Data = append(out.Data, t.Data...)
			rows += t.Shape[0]
			out.Shape = []int64{rows, t.Shape[1]}
		}
		return out
	}
	var out []Tensor
	for _, t := range m.Tensors {
		pre, ok := strings.CutSuffix(t.Name, "self_attn.q_proj.weight")
		if ok {
			f := fuse(t.Name, pre+"self_attn.k_proj.weight", pre+"self_attn.v_proj.weight")
			f.Name = pre + "self_attn.qkv_proj.weight"
			out = append(out, f)
			continue
		}
		if pre, ok := strings.CutSuffix(t.Name, "mlp.gate_proj.weight"); ok {
			f := fuse(t.Name, pre+"mlp.up_proj.weight")
			f.Name = pre + "mlp.gate_up_proj.weight"
			out = append(out, f)
			continue
		}
		if strings.HasSuffix(t.Name, "self_attn.k_proj.weight") || strings.HasSuffix(t.Name, "self_attn.v_proj.weight") || strings.HasSuffix(t.Name, "mlp.up_proj.weight") {
			continue
		}
		out = append(out, t)
	}
	m.Tensors = out
}

// fileName is a tensor's name in model.safetensors: the text weights of
// mistral3, ministral3, qwen3_5 and the multimodal Gemmas under
// "language_model.".
func (p Params) fileName(name string) string {
	if p.Arch == modelfile.ArchQwen35 || p.Arch == modelfile.ArchQwen35MoE {
		return "language_model." + name // mlx-lm's Qwen3.5 layout
	}
	if p.Multimodal && !isVisionTensor(name) {
		return "language_model." + name // mlx-lm's Gemma 3/4 layout
	}
	if (p.Arch == modelfile.ArchMistral3 || p.Arch == modelfile.ArchMinistral3) && !strings.HasPrefix(name, "vision_tower.") && !strings.HasPrefix(name, "multi_modal_projector.") {
		return "language_model." + name
	}
	return name
}

// layerTypes is layer_types with one full layer in every SlidingPattern.
func (p Params) layerTypes() []string {
	types := make([]string, p.Layers)
	for i := range types {
		types[i] = "sliding_attention"
		if (i+1)%p.SlidingPattern == 0 {
			types[i] = "full_attention"
		}
	}
	return types
}

// gptOssConfig is GptOssForCausalLM's config.json (gpt-oss-20b's keys).
func (m *Model) gptOssConfig(c map[string]any) map[string]any {
	p := m.Params
	return m.setKeys(c, map[string]any{
		"architectures":          []string{"GptOssForCausalLM"},
		"model_type":             modelfile.ArchGptOss,
		"attention_bias":         true,
		"experts_per_token":      p.ExpertsPerTok,
		"num_experts_per_tok":    p.ExpertsPerTok,
		"num_local_experts":      p.Experts,
		"initial_context_length": 4096,
		"layer_types":            p.layerTypes(),
		"output_router_logits":   false,
		"router_aux_loss_coef":   0.9,
		"sliding_window":         p.SlidingWindow,
		"swiglu_limit":           json.Number("7.0"), // a float, as transformers' GptOssConfig insists (7 fails mlx_lm.convert)
		"transformers_version":   "4.55.0.dev0",
	})
}

// setKeys sets keys in config.json c, and pad_token_id when the
// tokenizer has a padding token; it returns c.
func (m *Model) setKeys(c, keys map[string]any) map[string]any {
	for k, v := range keys {
		c[k] = v
	}
	if m.Tokenizer.Pad >= 0 {
		c["pad_token_id"] = m.Tokenizer.Pad
	}
	return c
}

// gptOssLayers draws gpt-oss's layers with the magnitudes of init.go:
// biased q, k, v (their biases spread by 0.1), the o and expert down
// biases small and on the content dimensions only, a router and expert
// gates at unit gain, and one sink logit per head around 0.
func (m *Model) gptOssLayers(sc scales, rng *rand.Rand,
	inputs func(n, out int, gain float64) []float32,
	outputs func(n, in int, std float64) []float32,
	add func(name string, data []float32, shape ...int) []float32,
	fill func(n int, v float32) []float32,
) {
	p := m.Params
	q := p.Heads * p.HeadDim
	e, in := p.Experts, p.Intermediate
	normal := normalFunc(rng)
	// content: n values of residual biases, zero on the reserved dims.
	content := func(n int, std float64) []float32 {
		d := normal(n, std)
		for r := range n / p.Hidden {
			clear(d[r*p.Hidden+sc.content : (r+1)*p.Hidden])
		}
		return d
	}
	oStd := sc.rho * initializerRange / (0.7 * math.Sqrt(float64(q)))
	// (clip(up) + 1)·g·σ(1.702g) over unit-variance inputs has an RMS of
	// ~1.
	downStd := sc.rho * initializerRange / math.Sqrt(float64(in))
	for l := range p.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		add(pre+"input_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		biasedQKV(p, pre, normal, inputs, add)
		add(pre+"self_attn.o_proj.weight", outputs(1, q, oStd), p.Hidden, q)
		add(pre+"self_attn.o_proj.bias", content(p.Hidden, 0.1*oStd), p.Hidden)
		add(pre+"self_attn.sinks", normal(p.Heads, 1), p.Heads)
		add(pre+"post_attention_layernorm.weight", fill(p.Hidden, 1), p.Hidden)
		add(pre+"mlp.router.weight", inputs(1, e, 1), e, p.Hidden)
		add(pre+"mlp.router.bias", normal(e, 0.1), e)
		add(pre+"mlp.experts.gate_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
		add(pre+"mlp.experts.gate_proj.bias", normal(e*in, 0.1), e, in)
		add(pre+"mlp.experts.up_proj.weight", inputs(e, in, 1), e, in, p.Hidden)
		add(pre+"mlp.experts.up_proj.bias", normal(e*in, 0.1), e, in)
		add(pre+"mlp.experts.down_proj.weight", outputs(e, in, downStd), e, p.Hidden, in)
		add(pre+"mlp.experts.down_proj.bias", content(e*p.Hidden, 0.1*downStd), e, p.Hidden)
	}
}
