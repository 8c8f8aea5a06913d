package model

import (
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// gpt-oss (mlx-lm's gpt_oss): Llama's pre-norm block with biased
// attention whose softmax counts a learned sink logit per head, on
// alternating sliding-window (128) and full layers, and in every layer a
// mixture of biased SwiGLU experts with gpt-oss's clamped gate:
//
//	h   = x + o(sink_attention(rope(q(n)), rope(k(n)), v(n))),  n = rms_norm(x)
//	l   = router(m),  E = top_k(l),  w = softmax(l_E),  m = rms_norm(h)
//	out = h + Σ_{e∈E} w_e·down_e((clip(up_e(m)) + 1)·g·σ(1.702·g)),  g = min(gate_e(m), 7)
//
// The experts are stacked as mlx-lm stores them after its sanitize
// (mlp.experts.{gate,up,down}_proj with [experts, out] biases).
type gptOssBlock struct {
	inputNorm, postNorm backend.Vector
	attnProj                           // with biases
	sinks               backend.Vector // [heads]
	moe                 *oaiExperts
}

// oaiExperts is gpt-oss's mixture: the softmax is over the top k router
// logits only.
type oaiExperts struct {
	router         backend.Weight // [experts, hidden], biased
	gate, up, down []backend.Weight
	topK           int
	alpha, limit   float32
}

func loadGptOss(w *loader, prefix string) block {
	c := w.cfg
	n, hidden, inter := c.MoE.Experts, c.HiddenSize, c.MoE.Intermediate
	for _, p := range []string{"q_proj", "k_proj", "v_proj", "o_proj"} {
		w.requireBias(prefix + "self_attn." + p)
	}
	m := prefix + "mlp."
	w.requireBias(m + "router")
	return &gptOssBlock{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
		attnProj:  loadAttnProj(w, prefix),
		sinks:     w.vector(prefix + "self_attn.sinks"),
		moe: &oaiExperts{
			router: w.matrix(m+"router", n, hidden),
			gate:   w.experts(m+"experts.gate_proj", n, inter, hidden),
			up:     w.experts(m+"experts.up_proj", n, inter, hidden),
			down:   w.experts(m+"experts.down_proj", n, hidden, inter),
			topK:   c.MoE.TopK,
			alpha:  float32(c.GptOss.SwiGLUAlpha),
			limit:  float32(c.GptOss.SwiGLULimit),
		},
	}
}

// setupGptOss gives the sliding layers their window (the KV cache keeps
// every position, as for Gemma).
func setupGptOss(m *Model) error {
	if m.Config.GptOss == nil || m.Config.MoE == nil {
		return fmt.Errorf("%w: gpt_oss without its experts", modelfile.ErrInvalidConfig)
	}
	return setupWindows(m)
}

func (b *gptOssBlock) forward(f *frame, x backend.Array) backend.Array {
	n := f.norm(x, b.inputNorm)
	q := f.rotate(f.Linear(n, b.q))
	k := f.rotate(f.Linear(n, b.k))
	v := f.Linear(n, b.v)
	h := f.Add(x, f.Linear(f.SinkAttention(f.layer, q, k, v, f.scale, f.window, b.sinks, f.batch), b.o))
	return f.Add(h, b.moe.forward(f, f.norm(h, b.postNorm)))
}

func (m *oaiExperts) forward(f *frame, x backend.Array) backend.Array {
	act := func(gate, up backend.Array) backend.Array { return f.ClampedSwiGLU(gate, up, m.alpha, m.limit) }
	return runExperts(f, x, m.router, m.gate, m.up, m.down, m.topK, m.route, act)
}

// route picks each token's k experts with the largest router logits
// (ties to the lower expert) and weighs them by the softmax of those k
// logits, in float32 (mlx-lm: top k by argpartition, then a precise
// softmax).
func (m *oaiExperts) route(logits []float32, tokens int) (rows, which []int, weights []float32) {
	n, k := len(m.gate), m.topK
	rows, which, weights = make([]int, 0, tokens*k), make([]int, 0, tokens*k), make([]float32, 0, tokens*k)
	order := make([]int, n)
	for t := range tokens {
		l := logits[t*n : (t+1)*n]
		for e := range order {
			order[e] = e
		}
		sortDescending(order, l)
		top := order[:k]
		mx := l[top[0]]
		var sum float32
		ws := make([]float32, k)
		for j, e := range top {
			ws[j] = float32(math.Exp(float64(l[e] - mx)))
			sum += ws[j]
		}
		for j, e := range top {
			rows, which, weights = append(rows, t), append(which, e), append(weights, ws[j]/sum)
		}
	}
	return rows, which, weights
}
