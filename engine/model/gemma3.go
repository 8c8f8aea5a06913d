package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// Gemma 3 (mlx-lm's gemma3_text): Qwen3's attention with per-head q/k
// norms, but every norm scales by 1 + weight, the attention and the MLP
// outputs are normed again before the residual add, the MLP gate is
// GELU-tanh, the embeddings are scaled by √hidden, and most layers are
// local: they attend to the last sliding_window positions with their own
// RoPE base, one in sliding_window_pattern is global.
//
//	h   = x + norm(o(attention(rope(qn(q(n))), rope(kn(k(n))), v(n)))),  n = norm(x)
//	out = h + norm(down(gelu_tanh(gate(m)) · up(m))),  m = norm(h)
type gemma3Block struct {
	inputNorm, postAttnNorm backend.Vector
	preFFNorm, postFFNorm   backend.Vector
	attn                    qkNormAttention
	mlp                     mlp
}

func loadGemma3(w *loader, prefix string) block {
	return &gemma3Block{
		inputNorm:    w.vector(prefix + "input_layernorm.weight"),
		postAttnNorm: w.vector(prefix + "post_attention_layernorm.weight"),
		preFFNorm:    w.vector(prefix + "pre_feedforward_layernorm.weight"),
		postFFNorm:   w.vector(prefix + "post_feedforward_layernorm.weight"),
		attn:         loadQKNormAttention(w, prefix),
		mlp:          loadMLP(w, prefix),
	}
}

func (b *gemma3Block) forward(f *frame, x backend.Array) backend.Array {
	h := f.Add(x, f.norm(b.attn.forward(f, f.norm(x, b.inputNorm)), b.postAttnNorm))
	n := f.norm(h, b.preFFNorm)
	r := f.Linear(f.GELUTanhGate(f.Linear(n, b.mlp.gate), f.Linear(n, b.mlp.up)), b.mlp.down)
	return f.Add(h, f.norm(r, b.postFFNorm))
}

// setupGemma3 sets Gemma's constants as mlx-lm does: the attention scale
// query_pre_attn_scalar^−½; local layers attend over sliding_window
// positions with RoPE base rope_local_base_freq and no scaling (global
// layers keep the config's RoPE, scaling included); the embedding scale
// √hidden rounded to bfloat16 (mlx-lm multiplies by
// mx.array(hidden**0.5, mx.bfloat16)); norm weights used as 1 + w; the
// final logit soft-cap if the config sets one.
func setupGemma3(m *Model) error {
	c := m.Config
	g := c.Gemma
	if g == nil || len(g.Sliding) != c.NumHiddenLayers {
		return fmt.Errorf("%w: gemma3_text without its layer kinds", modelfile.ErrInvalidConfig)
	}
	m.scale = float32(1 / math.Sqrt(g.QueryPreAttnScalar))
	local := &backend.RoPE{HeadDim: m.headDim, Dims: m.headDim, Base: g.RopeLocalBaseFreq, Scale: 1}
	m.windows = make([]int, c.NumHiddenLayers)
	m.ropes = make([]*backend.RoPE, c.NumHiddenLayers)
	for i, sliding := range g.Sliding {
		if sliding {
			m.windows[i], m.ropes[i] = g.SlidingWindow, local
		}
	}
	m.embedScale = tensor.BF16ToF32(tensor.F32ToBF16(float32(math.Sqrt(float64(c.HiddenSize)))))
	m.normOffset = 1
	m.softcap = float32(g.FinalLogitSoftcapping)
	return nil
}

// offsetVector returns v with off added to every value, as a float32
// vector (the addition in float32, as mlx-lm's 1.0 + weight is on
// float32 parameters).
func offsetVector(v backend.VectorData, off float32) (backend.VectorData, error) {
	vals, err := tensor.Floats(v.Data)
	if err != nil {
		return v, fmt.Errorf("%s: %w", v.Name, err)
	}
	data := make([]byte, 4*len(vals))
	for i, x := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x+off))
	}
	v.Data = tensor.Tensor{Name: v.Data.Name, DType: tensor.F32, Shape: v.Data.Shape, Data: data}
	return v, nil
}
