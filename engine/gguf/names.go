package gguf

import (
	"strconv"
	"strings"
)

// Tensor names: Hugging Face (transformers llama/qwen2/qwen3 modules) and
// GGUF (llama.cpp) spellings. Layer tensors carry the layer number:
// model.layers.N.… ↔ blk.N.…. A mixture's experts are named as mlx-lm
// stacks them (mlp.switch_mlp.*_proj.weight [experts, out, in]), which is
// the shape of llama.cpp's ffn_*_exps tensors (ne = [in, out, experts]).

var globalNames = [][2]string{
	{"model.embed_tokens.weight", "token_embd.weight"},
	{"model.norm.weight", "output_norm.weight"},
	{"lm_head.weight", "output.weight"},
}

var layerNames = [][2]string{
	{"self_attn.q_proj.weight", "attn_q.weight"},
	{"self_attn.q_proj.bias", "attn_q.bias"},
	{"self_attn.k_proj.weight", "attn_k.weight"},
	{"self_attn.k_proj.bias", "attn_k.bias"},
	{"self_attn.v_proj.weight", "attn_v.weight"},
	{"self_attn.v_proj.bias", "attn_v.bias"},
	{"self_attn.o_proj.weight", "attn_output.weight"},
	{"self_attn.q_norm.weight", "attn_q_norm.weight"},
	{"self_attn.k_norm.weight", "attn_k_norm.weight"},
	{"input_layernorm.weight", "attn_norm.weight"},
	{"post_attention_layernorm.weight", "ffn_norm.weight"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"},
	{"mlp.up_proj.weight", "ffn_up.weight"},
	{"mlp.down_proj.weight", "ffn_down.weight"},
	// Mixture of experts: the router and the stacked experts.
	{"mlp.gate.weight", "ffn_gate_inp.weight"},
	{"mlp.switch_mlp.gate_proj.weight", "ffn_gate_exps.weight"},
	{"mlp.switch_mlp.up_proj.weight", "ffn_up_exps.weight"},
	{"mlp.switch_mlp.down_proj.weight", "ffn_down_exps.weight"},
	{"self_attn.o_proj.bias", "attn_output.bias"},
}

// archLayerNames are the layer names of families whose Hugging Face (or
// llama.cpp) names differ from layerNames', keyed by config.json's
// model_type; they are looked up before layerNames. gpt-oss
// (llama.cpp's converter and gguf-py's TensorNameMap for MODEL_ARCH.GPT_OSS):
// its pre-FFN norm is attn_post_norm, not ffn_norm; its sinks, a vector
// the converter names with a .weight suffix; its biased router
// (mlp.router) and its biased experts, as mlx-lm stacks them
// (mlp.experts.*_proj, weights [experts, out, in], biases [experts, out]).
var archLayerNames = map[string][][2]string{
	"gpt_oss": {
		{"post_attention_layernorm.weight", "post_attention_norm.weight"},
		{"self_attn.sinks", "attn_sinks.weight"},
		{"mlp.router.weight", "ffn_gate_inp.weight"},
		{"mlp.router.bias", "ffn_gate_inp.bias"},
		{"mlp.experts.gate_proj.weight", "ffn_gate_exps.weight"},
		{"mlp.experts.gate_proj.bias", "ffn_gate_exps.bias"},
		{"mlp.experts.up_proj.weight", "ffn_up_exps.weight"},
		{"mlp.experts.up_proj.bias", "ffn_up_exps.bias"},
		{"mlp.experts.down_proj.weight", "ffn_down_exps.weight"},
		{"mlp.experts.down_proj.bias", "ffn_down_exps.bias"},
	},
}

// archNames pairs config.json model_type names with llama.cpp's
// general.architecture where the two differ.
var archNames = [][2]string{
	{"qwen3_moe", "qwen3moe"},
	{"gpt_oss", "gpt-oss"},
}

// GGUFArch maps a config.json model_type to llama.cpp's architecture name
// (itself when they agree).
func GGUFArch(modelType string) string {
	for _, p := range archNames {
		if p[0] == modelType {
			return p[1]
		}
	}
	return modelType
}

// HFArch maps llama.cpp's architecture name to config.json's model_type
// (itself when they agree).
func HFArch(arch string) string {
	for _, p := range archNames {
		if p[1] == arch {
			return p[0]
		}
	}
	return arch
}

// GGUFName maps a Hugging Face tensor name to its GGUF name.
func GGUFName(hf string) (string, bool) {
	return mapName(hf, "model.layers.", "blk.", 0, nil)
}

// HFName maps a GGUF tensor name to its Hugging Face name.
func HFName(gguf string) (string, bool) {
	return mapName(gguf, "blk.", "model.layers.", 1, nil)
}

// GGUFNameFor is GGUFName for a family (config.json's model_type) whose
// names differ from the common table's (gpt_oss).
func GGUFNameFor(modelType, hf string) (string, bool) {
	return mapName(hf, "model.layers.", "blk.", 0, archLayerNames[modelType])
}

// HFNameFor is HFName for a family (config.json's model_type).
func HFNameFor(modelType, gguf string) (string, bool) {
	return mapName(gguf, "blk.", "model.layers.", 1, archLayerNames[modelType])
}

// mapName translates name using column from of the tables (0 = HF, 1 =
// GGUF) into the other column, looking in first (a family's own layer
// names) before layerNames.
func mapName(name, fromPrefix, toPrefix string, from int, first [][2]string) (string, bool) {
	to := 1 - from
	for _, p := range globalNames {
		if p[from] == name {
			return p[to], true
		}
	}
	rest, ok := strings.CutPrefix(name, fromPrefix)
	if !ok {
		return "", false
	}
	num, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if n, err := strconv.Atoi(num); err != nil || n < 0 || strconv.Itoa(n) != num {
		return "", false
	}
	for _, table := range [][][2]string{first, layerNames} {
		for _, p := range table {
			if p[from] == suffix {
				return toPrefix + num + "." + p[to], true
			}
		}
	}
	return "", false
}
