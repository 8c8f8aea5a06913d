package model

import (
	"encoding/json"
	"fmt"
	"math"

	"fusion/engine/gguf"
	"fusion/engine/modelfile"
)

// ggufConfig maps a GGUF file's metadata to a validated config.json, so
// both formats run through the same checks and defaults. Rope scaling
// comes from {arch}.rope.scaling.* (linear, yarn) or, for Llama 3, from a
// rope_freqs.weight tensor (see ggufRopeFreqs).
func ggufConfig(f *gguf.File) (*modelfile.Config, error) {
	mc, err := f.ModelConfig()
	if err != nil {
		return nil, err
	}
	c := map[string]any{
		"model_type":          mc.ModelType,
		"hidden_size":         mc.HiddenSize,
		"num_hidden_layers":   mc.NumHiddenLayers,
		"num_attention_heads": mc.NumAttentionHeads,
		"num_key_value_heads": mc.NumKeyValueHeads,
		"head_dim":            mc.HeadDim,
		"intermediate_size":   mc.IntermediateSize,
		"rms_norm_eps":        mc.RMSNormEps,
		"rope_theta":          mc.RopeTheta,
		"vocab_size":          mc.VocabSize,
		"tie_word_embeddings": mc.TieWordEmbeddings,
	}
	if mc.MaxPositionEmbeddings > 0 {
		c["max_position_embeddings"] = mc.MaxPositionEmbeddings
	}
	switch {
	case mc.ModelType == modelfile.ArchGptOss:
		if err := ggufGptOss(f, mc, c); err != nil {
			return nil, err
		}
	case mc.Experts > 0:
		ggufMoE(f, mc, c)
	}
	// Keys are under llama.cpp's architecture name (qwen3moe), not
	// model_type (qwen3_moe).
	key := func(s string) string { return gguf.ArchKey(f.Architecture(), "rope.scaling."+s) }
	typ, _ := f.Meta(key("type")).AsString()
	factor, _ := f.Meta(key("factor")).AsFloat64()
	switch typ {
	case "", "none":
	case "linear", "yarn":
		s := map[string]any{"rope_type": typ, "factor": factor}
		if n, ok := f.Meta(key("original_context_length")).AsInt64(); ok {
			s["original_max_position_embeddings"] = n
		}
		for gk, hk := range map[string]string{"yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow"} {
			if v, ok := f.Meta(key(gk)).AsFloat64(); ok {
				s[hk] = v
			}
		}
		c["rope_scaling"] = s
	default:
		return nil, fmt.Errorf("%s: %w: rope scaling %q", f.Name, modelfile.ErrUnsupported, typ)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	cfg, err := modelfile.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	return cfg, nil
}

// ggufMoE adds a mixture's config.json keys to c. llama.cpp has no
// decoder_sparse_step: a layer is sparse when it has a router
// (blk.N.ffn_gate_inp.weight), and the others are mlp_only_layers. Its
// qwen3moe graph always renormalizes the chosen experts' weights, so
// norm_topk_prob is true unless {arch}.expert_weights_norm says otherwise.
func ggufMoE(f *gguf.File, mc gguf.ModelConfig, c map[string]any) {
	dense := []int{}
	for l := range mc.NumHiddenLayers {
		if _, ok := f.Tensor(fmt.Sprintf("blk.%d.ffn_gate_inp.weight", l)); !ok {
			dense = append(dense, l)
		}
	}
	norm := true
	if mc.NormTopK != nil {
		norm = *mc.NormTopK
	}
	c["num_experts"] = mc.Experts
	c["num_experts_per_tok"] = mc.ExpertsUsed
	c["moe_intermediate_size"] = mc.ExpertIntermediate
	c["decoder_sparse_step"] = 1
	c["mlp_only_layers"] = dense
	c["norm_topk_prob"] = norm
}

// ggufGptOss adds gpt-oss's config.json keys to c from llama.cpp's
// gpt-oss metadata: the mixture (expert_count, expert_used_count, the
// experts' width expert_feed_forward_length as intermediate_size), the
// window of attention.sliding_window and which layers slide, as
// llama.cpp's set_swa_pattern decides from attention.sliding_window_pattern
// (a per-layer bool array, or a period n: layer l slides when l mod n <
// n−1; 2 when absent, so the even layers slide — gpt-oss's layer_types).
// Its yarn RoPE comes from rope.scaling.* as for every family.
func ggufGptOss(f *gguf.File, mc gguf.ModelConfig, c map[string]any) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: gpt-oss: %s", f.Name, modelfile.ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if mc.Experts == 0 {
		return bad("%s is missing", gguf.ArchKey(f.Architecture(), gguf.SuffixExpertCount))
	}
	if mc.SlidingWindow == 0 {
		return bad("%s is missing", gguf.ArchKey(f.Architecture(), gguf.SuffixSlidingWindow))
	}
	sliding := make([]bool, mc.NumHiddenLayers)
	key := gguf.ArchKey(f.Architecture(), "attention.sliding_window_pattern")
	if v, ok := f.Lookup(key); ok && v.Type() == gguf.TypeArray {
		bools, ok := v.Any().([]bool)
		if !ok || len(bools) != mc.NumHiddenLayers {
			return bad("%s is %v, want %d bools", key, v, mc.NumHiddenLayers)
		}
		copy(sliding, bools)
	} else {
		n := int64(2)
		if v, ok := f.Meta(key).AsInt64(); ok {
			n = v
		}
		for l := range sliding {
			sliding[l] = n == 0 || int64(l)%n < n-1
		}
	}
	types := make([]string, len(sliding))
	for l, s := range sliding {
		types[l] = "full_attention"
		if s {
			types[l] = "sliding_attention"
		}
	}
	c["num_local_experts"] = mc.Experts
	c["num_experts_per_tok"] = mc.ExpertsUsed
	c["intermediate_size"] = mc.ExpertIntermediate
	c["sliding_window"] = mc.SlidingWindow
	c["layer_types"] = types
	return nil
}

// ggufRopeFreqs returns the RoPE periods of a file with a rope_freqs.weight
// tensor (llama.cpp's Llama 3 scaling: θ_i = p·base^(−2i/d)/factor_i), or
// nil if it has none.
func ggufRopeFreqs(f *gguf.File, base float64, dims int) ([]float32, error) {
	t, ok := f.Tensor("rope_freqs.weight")
	if !ok {
		return nil, nil
	}
	factors, err := gguf.ToFloat32(t)
	if err != nil || len(factors) != dims/2 {
		return nil, fmt.Errorf("%w: rope_freqs.weight has %d values (%v), want %d", ErrBadWeights, len(factors), err, dims/2)
	}
	freqs := make([]float32, dims/2)
	for i, ff := range factors {
		freqs[i] = float32(math.Pow(base, float64(2*i)/float64(dims))) * ff
	}
	return freqs, nil
}

// InspectGGUF reads a GGUF file's metadata and tensor table (the file
// mapped, no weight read) and returns its config, or why this engine
// cannot load it: an architecture or RoPE scaling it lacks, or a tensor
// type the backends do not run (an IQ4_XS or Q4_1 matrix, say). What the models list shows before anyone loads the file.
func InspectGGUF(path string) (*modelfile.Config, error) {
	f, err := gguf.Open(path, gguf.LoadMmap)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, err := ggufConfig(f)
	if err != nil {
		return nil, err
	}
	for _, t := range f.Tensors {
		if len(t.Shape) >= 2 {
			if _, err := ggufFormat(t); err != nil {
				return nil, err
			}
		}
	}
	return cfg, nil
}
