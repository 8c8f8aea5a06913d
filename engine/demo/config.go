package demo

import (
	"fusion/engine/modelfile"
)

// configJSON is config.json with the keys transformers and mlx-lm read for
// LlamaForCausalLM / Qwen3ForCausalLM, valued like Llama 3.2 and Qwen3
// checkpoints (the encoder sorts the keys, as transformers does).
func (m *Model) configJSON() map[string]any {
	p, tk := m.Params, m.Tokenizer
	c := map[string]any{
		"attention_bias":          false,
		"attention_dropout":       0.0,
		"bos_token_id":            nil,
		"eos_token_id":            tk.EOS,
		"head_dim":                p.HeadDim,
		"hidden_act":              "silu",
		"hidden_size":             p.Hidden,
		"initializer_range":       0.02,
		"intermediate_size":       p.Intermediate,
		"max_position_embeddings": p.MaxPositions,
		"num_attention_heads":     p.Heads,
		"num_hidden_layers":       p.Layers,
		"num_key_value_heads":     p.KVHeads,
		"rms_norm_eps":            p.RMSNormEps,
		"rope_scaling":            p.RopeScaling,
		"rope_theta":              p.RopeTheta,
		"tie_word_embeddings":     p.TieEmbeddings,
		"torch_dtype":             m.torchDType(),
		"use_cache":               true,
		"vocab_size":              p.Vocab,
	}
	switch {
	case tk.BOS >= 0:
		c["bos_token_id"] = tk.BOS
	case tk.Pad >= 0:
		c["bos_token_id"] = tk.Pad // Qwen3 names <|endoftext|> here
	}
	if p.Arch == modelfile.ArchLlama {
		c["architectures"] = []string{"LlamaForCausalLM"}
		c["model_type"] = "llama"
		c["mlp_bias"] = false
		c["pretraining_tp"] = 1
		c["transformers_version"] = "4.45.0.dev0"
	} else if p.Arch == modelfile.ArchQwen3MoE {
		// Qwen3-30B-A3B's keys.
		c["architectures"] = []string{"Qwen3MoeForCausalLM"}
		c["model_type"] = modelfile.ArchQwen3MoE
		c["decoder_sparse_step"] = p.SparseStep
		c["max_window_layers"] = p.Layers
		c["mlp_only_layers"] = []int{}
		c["moe_intermediate_size"] = p.MoEIntermediate
		c["norm_topk_prob"] = true
		c["num_experts"] = p.Experts
		c["num_experts_per_tok"] = p.ExpertsPerTok
		c["output_router_logits"] = false
		c["router_aux_loss_coef"] = 0.001
		c["sliding_window"] = nil
		c["use_sliding_window"] = false
		c["transformers_version"] = "4.51.0"
	} else {
		c["architectures"] = []string{"Qwen3ForCausalLM"}
		c["model_type"] = "qwen3"
		c["max_window_layers"] = p.Layers
		c["sliding_window"] = nil
		c["use_sliding_window"] = false
		c["transformers_version"] = "4.51.0"
	}
	if p.Arch == modelfile.ArchGemma3Text {
		m.gemmaConfig(c)
	}
	if o := m.Options; o.Quantize != 0 {
		// mlx-lm writes the block twice; "mode" is absent from older files.
		q := map[string]any{"group_size": o.GroupSize, "bits": o.Quantize, "mode": o.QuantMode}
		for path, params := range m.quantOverrides() {
			q[path] = params
		}
		c["quantization"] = q
		c["quantization_config"] = q
	}
	switch p.Arch {
	case modelfile.ArchPhi3, modelfile.ArchMistral, modelfile.ArchMistral3, modelfile.ArchMinistral3, modelfile.ArchGptOss:
		return m.familyConfig(c)
	case modelfile.ArchDeepseekV3:
		return m.deepseekConfig(c)
	case modelfile.ArchGlm4MoE:
		return m.glmConfig(c)
	case modelfile.ArchQwen3Next, modelfile.ArchQwen35, modelfile.ArchQwen35MoE:
		return m.qwen3NextConfig(c)
	case modelfile.ArchGemma4Text:
		return m.gemma4Config(c)
	}
	return c
}

// generationJSON is generation_config.json: every end-of-generation id and
// the family's sampling defaults.
func (m *Model) generationJSON() map[string]any {
	tk := m.Tokenizer
	g := map[string]any{"do_sample": true, "temperature": 0.6}
	if len(tk.EOSIDs) == 1 {
		g["eos_token_id"] = tk.EOSIDs[0]
	} else {
		g["eos_token_id"] = tk.EOSIDs
	}
	if bos, ok := m.Config["bos_token_id"]; ok && bos != nil {
		g["bos_token_id"] = bos
	}
	if m.Params.Arch == modelfile.ArchGemma3Text {
		g["cache_implementation"] = "hybrid"
		g["top_k"] = 64
		g["top_p"] = 0.95
		g["transformers_version"] = "4.50.0.dev0"
		if tk.Pad >= 0 {
			g["pad_token_id"] = tk.Pad
		}
	} else if m.Params.Arch == modelfile.ArchLlama {
		g["top_p"] = 0.9
		g["transformers_version"] = "4.45.0.dev0"
	} else {
		g["top_k"] = 20
		g["top_p"] = 0.95
		g["transformers_version"] = "4.51.0"
		if tk.Pad >= 0 {
			g["pad_token_id"] = tk.Pad
		}
	}
	return g
}
