package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/tensor"
)

// Qwen3-Next (mlx-lm's qwen3_next): every full_attention_interval-th
// layer is gated full attention, the others Gated DeltaNet linear
// attention (recurrent.go), each followed by a dense MLP or, in sparse
// layers, Qwen3-MoE's mixture plus a shared expert gated per token:
//
//	attention: q, gate = per-head halves of q_proj(x);  o_proj(attn(rope(norm(q)), rope(norm(k)), v)·σ(gate))
//	mixture:   Σ_top-k p_e·expert_e(x) + σ(shared_expert_gate(x))·shared_expert(x)
//
// The norms are stored with mlx-lm's +1 already added (its sanitize does
// it when it converts Hugging Face weights), so they load as they are.
func loadQwen3Next(w *loader, prefix string) block {
	c := w.cfg
	b := &qwen3NextBlock{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
	}
	if c.DeltaNet.Linear(w.layer) {
		b.linear = loadDeltaNet(w, prefix)
	} else {
		b.attn = loadGatedAttention(w, prefix)
	}
	if c.MoE.Sparse(w.layer) {
		sh := c.DeltaNet.SharedExpert
		p := prefix + "mlp."
		b.mlp = &sharedExperts{
			experts: loadExperts(w, p),
			shared: mlp{
				gate: w.matrix(p+"shared_expert.gate_proj", sh, c.HiddenSize),
				up:   w.matrix(p+"shared_expert.up_proj", sh, c.HiddenSize),
				down: w.matrix(p+"shared_expert.down_proj", c.HiddenSize, sh),
			},
			gate: w.matrix(p+"shared_expert_gate", 1, c.HiddenSize),
		}
	} else {
		m := loadMLP(w, prefix)
		b.mlp = &m
	}
	return b
}

type qwen3NextBlock struct {
	inputNorm, postNorm backend.Vector
	linear              *deltaNet       // Gated DeltaNet layers
	attn                *gatedAttention // full-attention layers
	mlp                 ffn
}

func (b *qwen3NextBlock) forward(f *frame, x backend.Array) backend.Array {
	n := f.norm(x, b.inputNorm)
	var r backend.Array
	if b.linear != nil {
		r = b.linear.forward(f, n)
	} else {
		// The KV cache holds the attention layers only (Model.kvSlot).
		layer := f.layer
		if f.kvSlot != nil {
			f.layer = f.kvSlot(layer)
		}
		r = b.attn.forward(f, n)
		f.layer = layer
	}
	h := f.Add(x, r)
	return f.Add(h, b.mlp.forward(f, f.norm(h, b.postNorm)))
}

// gatedAttention is Qwen3's attention (q/k norms, here with partial
// rotary) whose q_proj also yields a per-head output gate: each head's
// 2·head_dim outputs are [query | gate].
type gatedAttention struct {
	q, k, v, o   backend.Weight
	qNorm, kNorm backend.Vector
	heads, hd    int
}

func loadGatedAttention(w *loader, prefix string) *gatedAttention {
	d := w.dims
	p := prefix + "self_attn."
	return &gatedAttention{
		q:     w.matrix(p+"q_proj", 2*d.heads*d.headDim, d.hidden),
		k:     w.matrix(p+"k_proj", d.kvHeads*d.headDim, d.hidden),
		v:     w.matrix(p+"v_proj", d.kvHeads*d.headDim, d.hidden),
		o:     w.matrix(p+"o_proj", d.hidden, d.heads*d.headDim),
		qNorm: w.vector(p + "q_norm.weight"),
		kNorm: w.vector(p + "k_norm.weight"),
		heads: d.heads, hd: d.headDim,
	}
}

func (a *gatedAttention) forward(f *frame, x backend.Array) backend.Array {
	qg := f.Linear(x, a.q)
	q := f.rotate(f.norm(f.HeadSlice(qg, a.heads, 0, a.hd), a.qNorm))
	k := f.rotate(f.norm(f.Linear(x, a.k), a.kNorm))
	v := f.Linear(x, a.v)
	return f.Linear(f.SigmoidGate(f.attend(q, k, v), f.HeadSlice(qg, a.heads, a.hd, 2*a.hd)), a.o)
}

// sharedExperts is a softmax-routed mixture plus a shared expert weighed
// by σ(gate(x)) per token (Qwen3-Next's sparse block).
type sharedExperts struct {
	*experts
	shared mlp
	gate   backend.Weight // [1, hidden]
}

func (m *sharedExperts) forward(f *frame, x backend.Array) backend.Array {
	routed := m.experts.forward(f, x)
	return f.Add(routed, f.SigmoidGate(m.shared.forward(f, x), f.Linear(x, m.gate)))
}

// vectorShaped loads a float tensor of exactly shape as a flat vector.
func (l *loader) vectorShaped(name string, shape ...int64) backend.Vector {
	d, ok := l.lookupVector(name)
	if !ok {
		return nil
	}
	if fmt.Sprint(d.Data.Shape) != fmt.Sprint(shape) {
		l.fail(fmt.Errorf("%w: %s has shape %v, want %v", ErrBadWeights, name, d.Data.Shape, shape))
		return nil
	}
	return l.uploadVector(d)
}

// ones makes a vector of n ones (a norm without weights), one per model
// and width.
func (l *loader) ones(n int) backend.Vector {
	if l.err != nil {
		return nil
	}
	if v, ok := l.onesOf[n]; ok {
		return v
	}
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(1))
	}
	v := l.uploadVector(backend.VectorData{Name: "ones", Data: tensor.Tensor{Name: "ones", DType: tensor.F32, Shape: []int64{int64(n)}, Data: b}})
	if l.onesOf == nil {
		l.onesOf = map[int]backend.Vector{}
	}
	l.onesOf[n] = v
	return v
}
