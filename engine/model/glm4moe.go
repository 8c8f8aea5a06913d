package model

import (
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// GLM-4.5 and GLM-4.6 (mlx-lm's glm4_moe): Llama's pre-norm block with
// q/k/v biases, RMSNorms over each head of q and k when use_qk_norm (as
// Qwen3), RoPE on the first half of each head (partial_rotary_factor),
// and after first_k_dense_replace dense layers DeepSeek-V3's mixture:
// sigmoid-routed experts (group-limited, with e_score_correction_bias)
// plus shared experts (sigmoidExperts in deepseek.go).
type glm4MoEBlock struct {
	inputNorm, postNorm backend.Vector
	attn                ffn // attnProj, or qkNormAttention with use_qk_norm
	mlp                 ffn
}

func loadGlm4MoE(w *loader, prefix string) block {
	c := w.cfg
	if c.AttentionBias {
		for _, p := range []string{"q_proj", "k_proj", "v_proj"} {
			w.requireBias(prefix + "self_attn." + p)
		}
	}
	b := &glm4MoEBlock{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
	}
	if c.QKNorm {
		a := loadQKNormAttention(w, prefix)
		b.attn = &a
	} else {
		a := loadAttnProj(w, prefix)
		b.attn = &a
	}
	if c.Router.Sparse(w.layer) {
		b.mlp = loadSigmoidExperts(w, prefix+"mlp.")
	} else {
		d := loadMLP(w, prefix)
		b.mlp = &d
	}
	return b
}

func setupGlm4MoE(m *Model) error {
	if m.Config.MoE == nil || m.Config.Router == nil {
		return fmt.Errorf("%w: glm4_moe without its router", modelfile.ErrInvalidConfig)
	}
	return nil
}

func (b *glm4MoEBlock) forward(f *frame, x backend.Array) backend.Array {
	h := f.Add(x, b.attn.forward(f, f.norm(x, b.inputNorm)))
	return f.Add(h, b.mlp.forward(f, f.norm(h, b.postNorm)))
}
