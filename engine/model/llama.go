package model

import "fusion/engine/backend"

// Llama (Llama 2, Llama 3.x): pre-norm blocks of grouped-query attention
// with rotary positions, and a SwiGLU MLP.
//
//	h   = x + o(attention(rope(q(n)), rope(k(n)), v(n))),  n = rms_norm(x)
//	out = h + mlp(rms_norm(h))
type llamaBlock struct {
	inputNorm, postNorm backend.Vector
	attnProj            // with biases if attention_bias
	mlp                 mlp
}

func loadLlama(w *loader, prefix string) block {
	return &llamaBlock{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
		attnProj:  loadAttnProj(w, prefix),
		mlp:       loadMLP(w, prefix),
	}
}

// attnProj are an attention's q, k, v and o projections (with the biases
// the file has).
type attnProj struct{ q, k, v, o backend.Weight }

func loadAttnProj(w *loader, prefix string) attnProj {
	return attnProj{
		q: w.linear(prefix + "self_attn.q_proj"),
		k: w.linear(prefix + "self_attn.k_proj"),
		v: w.linear(prefix + "self_attn.v_proj"),
		o: w.linear(prefix + "self_attn.o_proj"),
	}
}

func (b *llamaBlock) forward(f *frame, x backend.Array) backend.Array {
	h := f.Add(x, b.attnProj.forward(f, f.norm(x, b.inputNorm)))
	return f.Add(h, b.mlp.forward(f, f.norm(h, b.postNorm)))
}

// forward is Llama's attention: o(attention(rope(q(x)), rope(k(x)), v(x))).
func (a *attnProj) forward(f *frame, x backend.Array) backend.Array {
	q := f.rotate(f.Linear(x, a.q))
	k := f.rotate(f.Linear(x, a.k))
	v := f.Linear(x, a.v)
	return f.Linear(f.attend(q, k, v), a.o)
}
