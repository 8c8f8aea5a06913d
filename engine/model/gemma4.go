package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// Gemma 4 (mlx-lm's gemma4_text): Gemma 3's sandwich of norms with plain
// RMSNorm weights (no 1 + w), q/k norms and a weightless v norm, an
// attention scale of 1, sliding layers with their own RoPE and global
// ones with a proportional RoPE, and three optional parts the config
// switches on:
//
//	h   = x + norm(o(attention(rope(qn(q(n))), rope(kn(k(n))), vn(v(n))))),  n = norm(x)
//	f   = mlp(norm(h))                               dense, or with the mixture:
//	f   = norm₁(mlp(norm(h))) + norm₂(Σ w_e·expert_e(norm'(h)))
//	h  += norm(f)
//	h  += norm(proj(gelu_tanh(gate(h)) · p_l))        per-layer inputs p_l
//	out = h · layer_scalar
//
// KV sharing: the last num_kv_shared_layers layers have no k/v of their
// own and attend over the cache of the last earlier layer of their kind
// (Attention without k and v). Per-layer inputs: every token gets, for
// each layer, p_l = (rms_norm(proj(e)·hidden^−½) + embed_per_layer(t)·√P)·2^−½,
// computed once per step from the scaled embedding e (perLayerInputs).
type gemma4Block struct {
	inputNorm, postAttnNorm backend.Vector
	preFFNorm, postFFNorm   backend.Vector
	q, k, v, o              backend.Weight // k, v nil on KV-shared layers; v nil with k = v
	qNorm, kNorm, vNorm     backend.Vector
	mlp                     mlp
	moe                     *gemma4Experts // nil: dense
	// Per-layer input gate (nil without per-layer inputs).
	plGate, plProj backend.Weight
	plNorm         backend.Vector
	scalar         float32
	// kvFrom is the layer whose cache the attention reads; plWidth is
	// the per-layer input width (the frame's inputs hold one slice per
	// layer).
	kvFrom, plWidth int
}

// gemma4Experts is the mixture beside the MLP: a router over the
// un-normed residual (rms_norm with scale·hidden^−½), softmax over the top
// k scores times a per-expert scale, GeGLU experts.
type gemma4Experts struct {
	oaiExperts                  // router, experts and top k; alpha, limit unused
	routerScale  backend.Vector // scale·hidden^−½
	expertScale  []float32
	preNorm      backend.Vector
	post1, post2 backend.Vector
}

// gemma4Extra are Gemma 4's model-level weights: the per-layer inputs.
type gemma4Extra struct {
	embed backend.Weight // [per-layer vocab, layers·P]
	proj  backend.Weight // [layers·P, hidden]
	norm  backend.Vector // [P]
	width int            // P
}

func loadGemma4(w *loader, prefix string) block {
	c, g := w.cfg, w.cfg.Gemma4
	l := w.layer
	// A full layer's heads are global_head_dim wide: its shapes are given
	// here, not by the loader's dims (head_dim). Norm weights are plain
	// (vectorOf: no offset).
	hidden, hd := c.HiddenSize, g.HeadDimOf(l, c.HeadDim)
	q, kv := c.NumAttentionHeads*hd, c.NumKeyValueHeads*hd
	from := g.SharedFrom()[l]
	b := &gemma4Block{
		inputNorm:    w.vector(prefix + "input_layernorm.weight"),
		postAttnNorm: w.vector(prefix + "post_attention_layernorm.weight"),
		preFFNorm:    w.vector(prefix + "pre_feedforward_layernorm.weight"),
		postFFNorm:   w.vector(prefix + "post_feedforward_layernorm.weight"),
		q:            w.matrix(prefix+"self_attn.q_proj", q, hidden),
		o:            w.matrix(prefix+"self_attn.o_proj", hidden, q),
		qNorm:        w.vectorOf(prefix+"self_attn.q_norm.weight", hd),
		scalar:       w.scalar(prefix + "layer_scalar"),
		kvFrom:       from,
		plWidth:      g.PerLayer,
	}
	if from == l {
		b.k = w.matrix(prefix+"self_attn.k_proj", kv, hidden)
		if !g.KEqV || g.Sliding[l] {
			b.v = w.matrix(prefix+"self_attn.v_proj", kv, hidden)
		}
		b.kNorm = w.vectorOf(prefix+"self_attn.k_norm.weight", hd)
		b.vNorm = w.ones(hd)
	}
	inter := c.IntermediateSize
	if g.DoubleWideMLP && l >= c.NumHiddenLayers-g.KVShared && g.KVShared > 0 {
		inter *= 2
	}
	b.mlp = mlp{
		gate: w.matrix(prefix+"mlp.gate_proj", inter, hidden),
		up:   w.matrix(prefix+"mlp.up_proj", inter, hidden),
		down: w.matrix(prefix+"mlp.down_proj", hidden, inter),
	}
	if c.MoE != nil {
		n, mi := c.MoE.Experts, c.MoE.Intermediate
		e := prefix + "experts.switch_glu."
		b.moe = &gemma4Experts{
			oaiExperts: oaiExperts{
				router: w.matrix(prefix+"router.proj", n, hidden),
				gate:   w.experts(e+"gate_proj", n, mi, hidden),
				up:     w.experts(e+"up_proj", n, mi, hidden),
				down:   w.experts(e+"down_proj", n, hidden, mi),
				topK:   c.MoE.TopK,
			},
			routerScale: w.scaledVector(prefix+"router.scale", hidden, float32(math.Pow(float64(hidden), -0.5))),
			expertScale: w.floats(prefix+"router.per_expert_scale", n),
			preNorm:     w.vector(prefix + "pre_feedforward_layernorm_2.weight"),
			post1:       w.vector(prefix + "post_feedforward_layernorm_1.weight"),
			post2:       w.vector(prefix + "post_feedforward_layernorm_2.weight"),
		}
	}
	if p := g.PerLayer; p > 0 {
		b.plGate = w.matrix(prefix+"per_layer_input_gate", p, hidden)
		b.plProj = w.matrix(prefix+"per_layer_projection", hidden, p)
		b.plNorm = w.vector(prefix + "post_per_layer_input_norm.weight")
	}
	return b
}

func (b *gemma4Block) forward(f *frame, x backend.Array) backend.Array {
	n := f.norm(x, b.inputNorm)
	q := f.rotate(f.norm(f.Linear(n, b.q), b.qNorm))
	var att backend.Array
	if b.k != nil {
		k := f.Linear(n, b.k)
		v := k
		if b.v != nil {
			v = f.Linear(n, b.v)
		}
		att = f.attend(q, f.rotate(f.norm(k, b.kNorm)), f.norm(v, b.vNorm))
	} else {
		layer := f.layer
		f.layer = b.kvFrom
		att = f.attend(q, nil, nil)
		f.layer = layer
	}
	h := f.Add(x, f.norm(f.Linear(att, b.o), b.postAttnNorm))
	m := f.norm(h, b.preFFNorm)
	ff := f.Linear(f.GELUTanhGate(f.Linear(m, b.mlp.gate), f.Linear(m, b.mlp.up)), b.mlp.down)
	if b.moe != nil {
		ff = f.Add(f.norm(ff, b.moe.post1), f.norm(b.moe.forward(f, h), b.moe.post2))
	}
	h = f.Add(h, f.norm(ff, b.postFFNorm))
	if b.plGate != nil {
		w := b.plWidth
		i := f.layer - f.perLayerFirst
		p := f.HeadSlice(f.perLayer, 1, i*w, (i+1)*w)
		g := f.GELUTanhGate(f.Linear(h, b.plGate), p)
		h = f.Add(h, f.norm(f.Linear(g, b.plProj), b.plNorm))
	}
	if b.scalar != 1 {
		h = f.Scale(h, b.scalar)
	}
	return h
}

// forward routes on the residual h and runs the experts on its other
// norm.
func (m *gemma4Experts) forward(f *frame, h backend.Array) backend.Array {
	x := f.norm(h, m.preNorm)
	scores := f.Linear(f.RMSNorm(h, m.routerScale, f.eps), m.router)
	route := func(logits []float32, tokens int) (rows, which []int, weights []float32) {
		rows, which, weights = m.route(logits, tokens)
		for i, e := range which {
			weights[i] *= m.expertScale[e]
		}
		return rows, which, weights
	}
	return mixExperts(f, x, scores, m.gate, m.up, m.down, m.topK, route, f.GELUTanhGate)
}

// setupGemma4 sets Gemma 4's constants as mlx-lm does: attention scale 1;
// sliding layers with their window and RoPE, global ones with theirs;
// embeddings scaled by √hidden (a Python float: float32 in a float32
// model); norm weights as they are; the logit soft-cap; which cache each
// layer reads.
func setupGemma4(m *Model) error {
	c := m.Config
	g := c.Gemma4
	if g == nil || len(g.Sliding) != c.NumHiddenLayers {
		return fmt.Errorf("%w: gemma4_text without its layer kinds", modelfile.ErrInvalidConfig)
	}
	if g.PerLayer > 0 && g.PerLayerVocab < c.VocabSize {
		return fmt.Errorf("%w: gemma4_text: vocab_size_per_layer_input %d < vocab_size %d", modelfile.ErrUnsupported, g.PerLayerVocab, c.VocabSize)
	}
	m.scale = 1
	local, err := gemma4Rope(g.Local, m.headDim)
	if err != nil {
		return err
	}
	globalDim := m.headDim
	if l := slices.Index(g.Sliding, false); l >= 0 {
		globalDim = g.HeadDimOf(l, m.headDim)
	}
	global, err := gemma4Rope(g.Global, globalDim)
	if err != nil {
		return err
	}
	if globalDim != m.headDim {
		m.headDims = make([]int, c.NumHiddenLayers)
		for l := range m.headDims {
			m.headDims[l] = g.HeadDimOf(l, m.headDim)
		}
	}
	m.windows = make([]int, c.NumHiddenLayers)
	m.ropes = make([]*backend.RoPE, c.NumHiddenLayers)
	for i, sliding := range g.Sliding {
		m.ropes[i] = global
		if sliding {
			m.windows[i], m.ropes[i] = g.SlidingWindow, local
		}
	}
	m.embedScale = float32(math.Sqrt(float64(c.HiddenSize)))
	m.softcap = float32(g.FinalLogitSoftcapping)
	if g.KVShared > 0 {
		m.kvFrom = g.SharedFrom()
		for l := m.Layers.Start; l < m.Layers.End; l++ {
			if m.kvFrom[l] < m.Layers.Start {
				return fmt.Errorf("%w: gemma4_text: layer %d reads layer %d's KV, outside the range %v", ErrBadInput, l, m.kvFrom[l], m.Layers)
			}
		}
	}
	return nil
}

// gemma4Rope is one layer kind's RoPE: "default" rotates the whole head
// (mlx-lm ignores partial_rotary_factor there); "proportional" is
// mlx-lm's ProportionalRoPE, periods factor·θ^(2i/head_dim) for the
// first partial·head_dim/2 pairs and infinite (no rotation) for the
// others, over the whole head's pairs (i, i + head_dim/2).
func gemma4Rope(r modelfile.Gemma4Rope, hd int) (*backend.RoPE, error) {
	rope := &backend.RoPE{HeadDim: hd, Dims: hd, Base: r.Theta, Scale: 1}
	if r.Type != "proportional" {
		return rope, nil
	}
	rot := int(float64(hd) * r.PartialRotary)
	if rot%2 != 0 || rot > hd {
		return nil, fmt.Errorf("%w: gemma4_text: %d rotated features of %d", modelfile.ErrInvalidConfig, rot, hd)
	}
	rope.Freqs = make([]float32, hd/2)
	for i := range rope.Freqs {
		rope.Freqs[i] = float32(math.Inf(1))
		if 2*i < rot {
			exp := float32(2*i) / float32(hd)
			rope.Freqs[i] = float32(r.Factor) * float32(math.Pow(r.Theta, float64(exp)))
		}
	}
	return rope, nil
}

// loadGemma4Extra loads the per-layer inputs' weights (with the
// embedding: the range starts at layer 0).
func loadGemma4Extra(m *Model, w *loader) {
	c, g := m.Config, m.Config.Gemma4
	if g.PerLayer == 0 {
		return
	}
	all := c.NumHiddenLayers * g.PerLayer
	m.gemma4 = &gemma4Extra{
		embed: w.matrix("model.embed_tokens_per_layer", g.PerLayerVocab, all),
		proj:  w.matrix("model.per_layer_model_projection", all, c.HiddenSize),
		norm:  w.vectorOf("model.per_layer_projection_norm.weight", g.PerLayer),
		width: g.PerLayer,
	}
}

// perLayerInputs are every row's inputs of all layers [rows, layers·P],
// from the tokens ids and their scaled embeddings x.
func (e *gemma4Extra) perLayerInputs(s backend.Step, ids []int32, x backend.Array, hidden int, eps float32) backend.Array {
	tok := s.Scale(s.Embed(e.embed, ids), float32(math.Sqrt(float64(e.width))))
	proj := s.RMSNorm(s.Scale(s.Linear(x, e.proj), float32(math.Pow(float64(hidden), -0.5))), e.norm, eps)
	return s.Scale(s.Add(proj, tok), float32(math.Pow(2, -0.5)))
}

// vectorOf loads a float vector of n values, as it is (no norm offset).
func (l *loader) vectorOf(name string, n int) backend.Vector {
	d, ok := l.lookupVector(name)
	if !ok {
		return nil
	}
	if s := d.Data.Shape; len(s) != 1 || int(s[0]) != n {
		l.fail(fmt.Errorf("%w: %s has shape %v, want [%d]", ErrBadWeights, name, s, n))
		return nil
	}
	return l.uploadVector(d)
}

// floats reads a float vector of n values into Go memory.
func (l *loader) floats(name string, n int) []float32 {
	d, ok := l.lookupVector(name)
	if !ok {
		return nil
	}
	vals, err := tensor.Floats(d.Data)
	if err == nil && len(vals) != n {
		err = fmt.Errorf("%s has %d values, want %d", name, len(vals), n)
	}
	if err != nil {
		l.fail(fmt.Errorf("%w: %w", ErrBadWeights, err))
		return nil
	}
	return vals
}

// scalar reads a one-value tensor (1 if loading has failed).
func (l *loader) scalar(name string) float32 {
	if v := l.floats(name, 1); v != nil {
		return v[0]
	}
	return 1
}

// scaledVector loads a float vector of n values multiplied by s in
// float32 (mlx-lm's scale·root_size on float32 parameters).
func (l *loader) scaledVector(name string, n int, s float32) backend.Vector {
	vals := l.floats(name, n)
	if vals == nil {
		return nil
	}
	data := make([]byte, 4*n)
	for i, x := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x*s))
	}
	return l.uploadVector(backend.VectorData{Name: name, Data: tensor.Tensor{Name: name, DType: tensor.F32, Shape: []int64{int64(n)}, Data: data}})
}
