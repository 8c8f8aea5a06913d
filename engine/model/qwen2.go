package model

// Qwen2 / Qwen2.5: Llama's block, with biases on the q, k and v
// projections (Linear adds a weight's bias) and head_dim always
// hidden_size / num_attention_heads, as mlx-lm has it.
func loadQwen2(w *loader, prefix string) block {
	for _, p := range []string{"q_proj", "k_proj", "v_proj"} {
		w.requireBias(prefix + "self_attn." + p)
	}
	return loadLlama(w, prefix)
}
