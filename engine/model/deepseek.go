package model

import (
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// DeepSeek-V3 (mlx-lm's deepseek_v3): Llama's pre-norm block with
// multi-head latent attention, and after first_k_dense_replace dense
// layers a mixture of sigmoid-routed SwiGLU experts plus shared experts.
//
// MLA caches, per position, one latent c = kv_a_layernorm(kv_a(n)[:lora])
// and rotated key features k_pe = rope(kv_a(n)[lora:]) shared by every
// head. Head h's query q_h = [q_nope_h | q_pe_h] (q_b(q_a_layernorm(q_a(n)))
// or q_proj(n)) scores position j as
//
//	scale·((E_h q_nope_h)·c_j + rope(q_pe_h)·k_pe_j),  E_h = embed_q[h] [lora, nope]
//
// and its output is U_h·Σ_j p_j c_j (U_h = unembed_out[h] [v, lora]),
// then o_proj. We always run the absorbed form mlx-lm uses for one-token
// steps: the query is [E_h q_nope_h | rope(q_pe_h)] (HeadLinear), the
// key [c_j | k_pe_j] is one KV head of lora+rope features, and attention
// runs over it as an ordinary cache with that key as its value too; the
// first lora features of each head's output are Σ_j p_j c_j. mlx-lm's
// prefill expands the latent into per-head keys and values instead: the
// same sums in another order. One form for every chunk size keeps a
// sequence's logits bit-identical however it is chunked or batched.
type deepseekBlock struct {
	inputNorm, postNorm backend.Vector
	attn                *mla
	mlp                 ffn
}

// mla is multi-head latent attention's weights.
type mla struct {
	q, qa, qb   backend.Weight   // q_proj, or q_a_proj and q_b_proj (q_lora_rank)
	qaNorm      backend.Vector   // [q_lora_rank]
	kva         backend.Weight   // kv_a_proj_with_mqa [lora+rope, hidden]
	kvaNorm     backend.Vector   // [lora]
	embedQ      []backend.Weight // per head [lora, nope] (mlx-lm's MultiLinear embed_q)
	unembedOut  []backend.Weight // per head [v, lora] (unembed_out)
	o           backend.Weight
	heads, nope int
	rope, lora  int
}

// mlaNormEps is the epsilon of MLA's two low-rank norms (mlx-lm's
// nn.RMSNorm default; not rms_norm_eps).
const mlaNormEps = 1e-6

func loadDeepseekV3(w *loader, prefix string) block {
	c := w.cfg
	m, hidden, heads := c.MLA, c.HiddenSize, c.NumAttentionHeads
	a := &mla{heads: heads, nope: m.NopeDim, rope: m.RopeDim, lora: m.KVLoraRank}
	p := prefix + "self_attn."
	qOut := heads * (m.NopeDim + m.RopeDim)
	if m.QLoraRank == 0 {
		a.q = w.matrix(p+"q_proj", qOut, hidden)
	} else {
		a.qa = w.matrix(p+"q_a_proj", m.QLoraRank, hidden)
		a.qaNorm = w.vector(p + "q_a_layernorm.weight")
		a.qb = w.matrix(p+"q_b_proj", qOut, m.QLoraRank)
	}
	a.kva = w.matrix(p+"kv_a_proj_with_mqa", m.CacheDim(), hidden)
	a.kvaNorm = w.vector(p + "kv_a_layernorm.weight")
	a.embedQ, a.unembedOut = loadMLAHeads(w, p)
	a.o = w.matrix(p+"o_proj", hidden, heads*m.VDim)
	b := &deepseekBlock{
		inputNorm: w.vector(prefix + "input_layernorm.weight"),
		postNorm:  w.vector(prefix + "post_attention_layernorm.weight"),
		attn:      a,
	}
	if c.MoE == nil || !c.Router.Sparse(w.layer) {
		d := loadMLP(w, prefix)
		b.mlp = &d
		return b
	}
	b.mlp = loadSigmoidExperts(w, prefix+"mlp.")
	return b
}

// setupDeepseekV3 sets MLA's RoPE (the qk_rope_head_dim features,
// adjacent pairs) and attention scale: (nope+rope)^−½, times mscale² when
// yarn's mscale_all_dim is set and its factor exceeds 1.
func setupDeepseekV3(m *Model) error {
	c := m.Config
	if c.MLA == nil || (c.MoE != nil && c.Router == nil) {
		return fmt.Errorf("%w: deepseek_v3 without its latent attention or router", modelfile.ErrInvalidConfig)
	}
	r, err := newRoPE(c, c.MLA.RopeDim, true)
	if err != nil {
		return err
	}
	m.rope = r
	scale := 1 / math.Sqrt(float64(c.MLA.NopeDim+c.MLA.RopeDim))
	if s := c.RopeScaling; s != nil && s.MscaleAllDim != 0 && s.Factor > 1 {
		g := 0.1*s.MscaleAllDim*math.Log(s.Factor) + 1
		scale *= g * g
	}
	m.scale = float32(scale)
	return nil
}

// mlaCacheDim is the cache's head width: the latent and k_pe.
func mlaCacheDim(c *modelfile.Config) int { return c.MLA.CacheDim() }

func (b *deepseekBlock) forward(f *frame, x backend.Array) backend.Array {
	h := f.Add(x, b.attn.forward(f, f.norm(x, b.inputNorm)))
	return f.Add(h, b.mlp.forward(f, f.norm(h, b.postNorm)))
}

func (a *mla) forward(f *frame, x backend.Array) backend.Array {
	var q backend.Array
	if a.q != nil {
		q = f.Linear(x, a.q)
	} else {
		q = f.Linear(f.RMSNorm(f.Linear(x, a.qa), a.qaNorm, mlaNormEps), a.qb)
	}
	qhd := a.nope + a.rope
	qLat := f.HeadLinear(f.HeadSlice(q, a.heads, 0, a.nope), a.embedQ)
	qPe := f.rotate(f.HeadSlice(q, a.heads, a.nope, qhd))
	ckv := f.Linear(x, a.kva)
	latent := f.RMSNorm(f.HeadSlice(ckv, 1, 0, a.lora), a.kvaNorm, mlaNormEps)
	k := f.HeadConcat(latent, f.rotate(f.HeadSlice(ckv, 1, a.lora, a.lora+a.rope)), 1)
	out := f.Attention(f.layer, f.HeadConcat(qLat, qPe, a.heads), k, k, f.scale, f.batch)
	return f.Linear(f.HeadLinear(f.HeadSlice(out, a.heads, 0, a.lora), a.unembedOut), a.o)
}

// sigmoidExperts is DeepSeek-V3's (and GLM-4.5's) mixture: routed
// experts chosen by sigmoid scores with a correction bias within the
// best groups, plus shared experts on every token.
type sigmoidExperts struct {
	router         backend.Weight // mlp.gate.weight [experts, hidden] (never quantized)
	bias           []float32      // e_score_correction_bias
	gate, up, down []backend.Weight
	shared         *mlp // nil without shared experts
	topK           int
	normTopK       bool
	route          modelfile.Router
}

func loadSigmoidExperts(w *loader, prefix string) *sigmoidExperts {
	c := w.cfg
	n, hidden, inter := c.MoE.Experts, c.HiddenSize, c.MoE.Intermediate
	m := &sigmoidExperts{
		router:   w.matrix(prefix+"gate", n, hidden),
		bias:     w.hostVector(prefix+"gate.e_score_correction_bias", n),
		gate:     w.experts(prefix+"switch_mlp.gate_proj", n, inter, hidden),
		up:       w.experts(prefix+"switch_mlp.up_proj", n, inter, hidden),
		down:     w.experts(prefix+"switch_mlp.down_proj", n, hidden, inter),
		topK:     c.MoE.TopK,
		normTopK: c.MoE.NormTopK,
		route:    *c.Router,
	}
	if s := c.Router.SharedExperts; s > 0 {
		width := s * inter
		m.shared = &mlp{
			gate: w.matrix(prefix+"shared_experts.gate_proj", width, hidden),
			up:   w.matrix(prefix+"shared_experts.up_proj", width, hidden),
			down: w.matrix(prefix+"shared_experts.down_proj", hidden, width),
		}
	}
	return m
}

func (m *sigmoidExperts) forward(f *frame, x backend.Array) backend.Array {
	y := runExperts(f, x, m.router, m.gate, m.up, m.down, m.topK, m.choose, f.SwiGLU)
	if m.shared != nil {
		y = f.Add(y, m.shared.forward(f, x))
	}
	return y
}

// choose is mlx-lm's group_expert_select in float32: s = σ(logits),
// b = s + bias; with several groups, all but the topk_group groups with
// the largest sums of their two best b are set to 0 (zero, not −∞, as
// mlx-lm does); the k largest b are the experts (ties to the lower one),
// weighed by their s, divided by their sum when norm_topk_prob and k >
// 1, times routed_scaling_factor.
func (m *sigmoidExperts) choose(logits []float32, tokens int) (rows, which []int, weights []float32) {
	n, k := len(m.gate), m.topK
	groups, size := m.route.Groups, len(m.gate)/m.route.Groups
	rows, which, weights = make([]int, 0, tokens*k), make([]int, 0, tokens*k), make([]float32, 0, tokens*k)
	s, b := make([]float32, n), make([]float32, n)
	order, gorder := make([]int, n), make([]int, groups)
	gscore := make([]float32, groups)
	for t := range tokens {
		for e, v := range logits[t*n : (t+1)*n] {
			s[e] = float32(1 / (1 + math.Exp(-float64(v))))
			b[e] = s[e] + m.bias[e]
			order[e] = e
		}
		if groups > 1 {
			for g := range groups {
				first, second := float32(math.Inf(-1)), float32(math.Inf(-1))
				for _, v := range b[g*size : (g+1)*size] {
					if v > first {
						first, second = v, first
					} else if v > second {
						second = v
					}
				}
				gscore[g], gorder[g] = first+second, g
			}
			sortDescending(gorder, gscore)
			for _, g := range gorder[m.route.TopKGroups:] {
				clear(b[g*size : (g+1)*size])
			}
		}
		sortDescending(order, b)
		top := order[:k]
		var sum float32
		for _, e := range top {
			sum += s[e]
		}
		for _, e := range top {
			w := s[e]
			if k > 1 && m.normTopK {
				w /= sum
			}
			rows, which, weights = append(rows, t), append(which, e), append(weights, w*float32(m.route.ScalingFactor))
		}
	}
	return rows, which, weights
}

// hostVector reads the float vector name, of n values, into Go memory
// (a router's correction bias, used on the host).
func (l *loader) hostVector(name string, n int) []float32 {
	d, ok := l.lookupVector(name)
	if !ok {
		return nil
	}
	v, err := tensor.Floats(d.Data)
	if err != nil || len(v) != n {
		l.fail(fmt.Errorf("%w: %s has shape %v, want [%d] floats (%v)", ErrBadWeights, name, d.Data.Shape, n, err))
		return nil
	}
	l.bytes += 4 * int64(n) // held in Go memory, counted with the weights
	return v
}
