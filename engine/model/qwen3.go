package model

import "fusion/engine/backend"

// Qwen3: Llama's block with an RMSNorm over each head of q and k, after
// the projection and before RoPE; no biases.
//
//	q = rope(rms_norm_per_head(q(n))),  k = rope(rms_norm_per_head(k(n)))
type qwen3Block struct {
	inputNorm, postNorm backend.Vector
	attn                qkNormAttention
	mlp                 ffn
}

func loadQwen3(w *loader, prefix string) block {
	m := loadMLP(w, prefix)
	return newQwen3Block(w, prefix, &m)
}

// newQwen3Block loads the attention part of a Qwen3 layer around mlp.
func newQwen3Block(w *loader, prefix string, mlp ffn) *qwen3Block {
	return &qwen3Block{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
		attn:      loadQKNormAttention(w, prefix),
		mlp:       mlp,
	}
}

func (b *qwen3Block) forward(f *frame, x backend.Array) backend.Array {
	h := f.Add(x, b.attn.forward(f, f.norm(x, b.inputNorm)))
	return f.Add(h, b.mlp.forward(f, f.norm(h, b.postNorm)))
}

// qkNormAttention is attention with an RMSNorm over each head of q and k
// before RoPE (Qwen3, Gemma 3).
type qkNormAttention struct {
	attnProj
	qNorm, kNorm backend.Vector // [head_dim]
}

func loadQKNormAttention(w *loader, prefix string) qkNormAttention {
	return qkNormAttention{
		attnProj: loadAttnProj(w, prefix),
		qNorm:    w.vector(prefix + "self_attn.q_norm.weight"),
		kNorm:    w.vector(prefix + "self_attn.k_norm.weight"),
	}
}

func (a *qkNormAttention) forward(f *frame, x backend.Array) backend.Array {
	q := f.rotate(f.norm(f.Linear(x, a.q), a.qNorm))
	k := f.rotate(f.norm(f.Linear(x, a.k), a.kNorm))
	v := f.Linear(x, a.v)
	return f.Linear(f.attend(q, k, v), a.o)
}
