package flux2

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// Transformer is diffusers' Flux2Transformer2DModel on a compute backend:
// the velocity of the image tokens given the text's hidden states and the
// timestep. Fused projections are split into their parts when loaded
// (rows of a matrix, or columns for the single blocks' to_out), so that
// every product is one Linear.
type Transformer struct {
	cfg TransformerConfig
	params

	timeIn, timeOut    backend.Weight // time_guidance_embed.timestep_embedder
	modImg, modTxt     [6]backend.Weight
	modSingle          [3]backend.Weight // shift, scale, gate of every single block
	xEmbed, ctxEmbed   backend.Weight
	double             []doubleBlock
	single             []singleBlock
	outScale, outShift backend.Weight // norm_out.linear's halves
	projOut            backend.Weight
}

// params are a component's weights file and what has been uploaded from
// it to the backend (the transformer's, the VAE's).
type params struct {
	what    string // the component, for errors
	be      backend.Backend
	file    *safetensors.File
	bytes   int64 // the weights file's size
	quant   *modelfile.Quantization
	weights []backend.Weight
	vectors []backend.Vector
}

// open opens the weights of the component in folder sub and runs load,
// which uploads them; when it fails, what it uploaded is released.
func (p *params) open(be backend.Backend, dir, sub string, load func() error) error {
	f, err := safetensors.Open(filepath.Join(dir, sub, ComponentWeights), safetensors.LoadDefault)
	if err != nil {
		return err
	}
	*p = params{what: sub, be: be, file: f}
	if st, err := os.Stat(filepath.Join(dir, sub, ComponentWeights)); err == nil {
		p.bytes = st.Size()
	}
	if err := load(); err != nil {
		p.close()
		return err
	}
	return nil
}

// close releases the uploaded weights and closes the file.
func (p *params) close() error {
	if r, ok := p.be.(backend.Releaser); ok {
		r.Release(p.weights, p.vectors)
	}
	p.weights, p.vectors = nil, nil
	return p.file.Close()
}

// stream is one side (image or text) of a double-stream block.
type stream struct {
	q, k, v, out backend.Weight
	normQ, normK backend.Vector
	gate, up     backend.Weight // the halves of the feed-forward's linear_in
	down         backend.Weight // its linear_out
}

type doubleBlock struct{ img, txt stream }

// singleBlock is a parallel block: to_qkv_mlp_proj's rows as q, k, v and
// the feed-forward's gate and up, to_out's columns as the attention's and
// the feed-forward's output projections (summed).
type singleBlock struct {
	q, k, v, gate, up backend.Weight
	normQ, normK      backend.Vector
	outAttn, outMLP   backend.Weight
}

// LoadTransformer reads transformer/config.json and the weights of a
// checkpoint directory and uploads them to be. Close releases them.
func LoadTransformer(be backend.Backend, dir string) (*Transformer, error) {
	var cfg TransformerConfig
	if err := readJSON(filepath.Join(dir, TransformerDir, ComponentConfig), &cfg); err != nil {
		return nil, err
	}
	if cfg.GuidanceEmbeds {
		return nil, errors.New("flux2: guidance_embeds is not supported (FLUX.2 [klein] has no guidance embedder)")
	}
	if cfg.PatchSize != 1 || cfg.AttentionHeadDim%2 != 0 || cfg.NumAttentionHeads <= 0 {
		return nil, fmt.Errorf("flux2: unsupported transformer config (patch %d, %d heads of %d)", cfg.PatchSize, cfg.NumAttentionHeads, cfg.AttentionHeadDim)
	}
	quant, err := modelfile.ParseQuantization(cfg.Quantization)
	if err != nil {
		return nil, fmt.Errorf("flux2: transformer: %w", err)
	}
	m := &Transformer{cfg: cfg}
	if err := m.open(be, dir, TransformerDir, func() error { m.quant = quant; return m.load() }); err != nil {
		return nil, err
	}
	return m, nil
}

// Config is the transformer's configuration.
func (m *Transformer) Config() TransformerConfig { return m.cfg }

// Close releases the weights and closes the file.
func (m *Transformer) Close() error { return m.close() }

// load uploads every weight; the first error stops it.
func (m *Transformer) load() error {
	c := m.cfg
	d, ff := c.Inner(), c.MLPHidden()
	l := loader{m: &m.params}
	m.timeIn = l.linear("time_guidance_embed.timestep_embedder.linear_1")
	m.timeOut = l.linear("time_guidance_embed.timestep_embedder.linear_2")
	mi, mt, ms := l.split("double_stream_modulation_img.linear", d, 6), l.split("double_stream_modulation_txt.linear", d, 6), l.split("single_stream_modulation.linear", d, 3)
	copy(m.modImg[:], mi)
	copy(m.modTxt[:], mt)
	copy(m.modSingle[:], ms)
	m.xEmbed, m.ctxEmbed = l.linear("x_embedder"), l.linear("context_embedder")
	for i := range c.NumLayers {
		p := fmt.Sprintf("transformer_blocks.%d.", i)
		side := func(q, k, v, out, nq, nk, ff string) stream {
			gu := l.split(p+ff+".linear_in", c.MLPHidden(), 2)
			return stream{q: l.linear(p + q), k: l.linear(p + k), v: l.linear(p + v), out: l.linear(p + out),
				normQ: l.vector(p + nq), normK: l.vector(p + nk), gate: gu[0], up: gu[1], down: l.linear(p + ff + ".linear_out")}
		}
		m.double = append(m.double, doubleBlock{
			img: side("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.norm_q", "attn.norm_k", "ff"),
			txt: side("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out", "attn.norm_added_q", "attn.norm_added_k", "ff_context"),
		})
	}
	for i := range c.NumSingleLayers {
		p := fmt.Sprintf("single_transformer_blocks.%d.attn.", i)
		parts := l.splitAt(p+"to_qkv_mlp_proj", d, 2*d, 3*d, 3*d+ff)
		outs := l.columns(p+"to_out", d)
		m.single = append(m.single, singleBlock{q: parts[0], k: parts[1], v: parts[2], gate: parts[3], up: parts[4],
			normQ: l.vector(p + "norm_q"), normK: l.vector(p + "norm_k"), outAttn: outs[0], outMLP: outs[1]})
	}
	so := l.split("norm_out.linear", d, 2) // AdaLayerNormContinuous: scale first, then shift
	m.outScale, m.outShift = so[0], so[1]
	m.projOut = l.linear("proj_out")
	return l.err
}

// loader uploads named tensors, keeping the first error.
type loader struct {
	m   *params
	err error
}

func (l *loader) tensor(name string) (tensor.Tensor, bool) {
	if l.err != nil {
		return tensor.Tensor{}, false
	}
	t, ok := l.m.file.Tensor(name)
	if !ok {
		l.err = fmt.Errorf("flux2: %s weight %s is missing", l.m.what, name)
	}
	return t, ok
}

func (l *loader) upload(w backend.WeightData) backend.Weight {
	if l.err != nil {
		return nil
	}
	out, err := l.m.be.Weight(w)
	if err != nil {
		l.err = fmt.Errorf("flux2: %s: %w", w.Name, err)
		return nil
	}
	l.m.weights = append(l.m.weights, out)
	return out
}

// matrix is the module name's weight [out, in]: dense, or MLX affine
// quantized (name.weight packed, name.scales, name.biases) when the
// component's config has a quantization block and the module has scales.
func (l *loader) matrix(name string) backend.WeightData {
	if l.err != nil {
		return backend.WeightData{}
	}
	if _, ok := l.tensor(name + ".weight"); !ok {
		return backend.WeightData{}
	}
	lin, err := modelfile.LookupLinearFunc(l.m.file.Tensor, l.m.quant, name)
	if err != nil {
		l.err = fmt.Errorf("flux2: %s: %w", l.m.what, err)
		return backend.WeightData{}
	}
	d := backend.WeightData{Name: name, Format: backend.Dense, Out: lin.Out, In: lin.In, Data: lin.Weight, Bias: lin.Bias}
	if lin.Quantized {
		if lin.Mode != modelfile.ModeAffine {
			l.err = fmt.Errorf("flux2: %s: %s quantization (only affine loads)", name, lin.Mode)
			return backend.WeightData{}
		}
		d.Format, d.Scales, d.Biases, d.Bits, d.Group = backend.MLXAffine, lin.Scales, lin.Biases, lin.Bits, lin.GroupSize
	}
	return d
}

func (l *loader) linear(name string) backend.Weight { return l.upload(l.matrix(name)) }

// split cuts a weight into n equal row blocks of size rows (torch.chunk).
func (l *loader) split(name string, rows, n int) []backend.Weight {
	at := make([]int, n-1)
	for i := range at {
		at[i] = (i + 1) * rows
	}
	return l.splitAt(name, at...)
}

// splitAt cuts a weight's rows at the given boundaries.
func (l *loader) splitAt(name string, at ...int) []backend.Weight {
	w := l.matrix(name)
	out := make([]backend.Weight, len(at)+1)
	if l.err != nil {
		return out
	}
	bounds := append(append([]int{0}, at...), w.Out)
	for i := range out {
		part, err := backend.RowRange(w, bounds[i], bounds[i+1])
		if err != nil {
			l.err = fmt.Errorf("flux2: %w", err)
			return out
		}
		out[i] = l.upload(part)
	}
	return out
}

// columns cuts a weight into its first cols input columns and the rest,
// copying them: x·Wᵀ = x[:, :cols]·W₁ᵀ + x[:, cols:]·W₂ᵀ. A quantized
// weight is cut at a group boundary (its packed codes, scales and biases
// alike), so each part dequantizes to the same values.
func (l *loader) columns(name string, cols int) [2]backend.Weight {
	var out [2]backend.Weight
	w := l.matrix(name)
	if l.err != nil {
		return out
	}
	parts := []*tensor.Tensor{&w.Data}
	switch w.Format {
	case backend.Dense:
	case backend.MLXAffine:
		parts = append(parts, &w.Scales, &w.Biases)
	default:
		l.err = fmt.Errorf("flux2: %s: cannot split the columns of a %v weight", name, w.Format)
		return out
	}
	if cols <= 0 || cols >= w.In || (w.Format == backend.MLXAffine && cols%w.Group != 0) {
		l.err = fmt.Errorf("flux2: %s: cannot split %d columns of [%d, %d] %v", name, cols, w.Out, w.In, w.Format)
		return out
	}
	for i, r := range [2][2]int{{0, cols}, {cols, w.In}} {
		part := w
		part.Name, part.In = fmt.Sprintf("%s[:, %d:%d]", name, r[0], r[1]), r[1]-r[0]
		dst := []*tensor.Tensor{&part.Data, &part.Scales, &part.Biases}
		for j, t := range parts {
			c, err := columnRange(*t, w.Out, w.In, r[0], r[1])
			if err != nil {
				l.err = fmt.Errorf("flux2: %s: %w", name, err)
				return out
			}
			*dst[j] = c
		}
		out[i] = l.upload(part)
	}
	return out
}

// columnRange copies the share [from, to) of in logical columns of every
// one of a tensor's rows rows: for packed codes, scales or biases the
// share of each row's bytes (whole elements, or it is an error).
func columnRange(t tensor.Tensor, rows, in, from, to int) (tensor.Tensor, error) {
	size := t.DType.BlockBytes()
	if rows <= 0 || len(t.Data)%rows != 0 || len(t.Shape) != 2 {
		return t, fmt.Errorf("%s: %d bytes of shape %v for %d rows", t.Name, len(t.Data), t.Shape, rows)
	}
	rb := len(t.Data) / rows
	lo, hi := rb*from, rb*to
	if lo%in != 0 || hi%in != 0 || (lo/in)%size != 0 || (hi/in)%size != 0 {
		return t, fmt.Errorf("%s: columns [%d, %d) of %d are not whole %v elements", t.Name, from, to, in, t.DType)
	}
	lo, hi = lo/in, hi/in
	data := make([]byte, 0, rows*(hi-lo))
	for row := range rows {
		data = append(data, t.Data[row*rb+lo:row*rb+hi]...)
	}
	return tensor.Tensor{Name: fmt.Sprintf("%s[:, %d:%d]", t.Name, from, to), DType: t.DType,
		Shape: []int64{int64(rows), int64((hi - lo) / size)}, Data: data}, nil
}

func (l *loader) vector(name string) backend.Vector { return l.vectorOf(name + ".weight") }

// vectorOf uploads the tensor name as a vector.
func (l *loader) vectorOf(name string) backend.Vector {
	t, ok := l.tensor(name)
	if !ok {
		return nil
	}
	v, err := l.m.be.Vector(backend.VectorData{Name: name, Data: t})
	if err != nil {
		l.err = fmt.Errorf("flux2: %s: %w", name, err)
		return nil
	}
	l.m.vectors = append(l.m.vectors, v)
	return v
}

// Inputs is one image's transformer input.
type Inputs struct {
	Image    []float32 // packed latents [len(ImageIDs), in_channels]
	ImageIDs []PosID
	Text     []float32 // the text encoder's hidden states [len(TextIDs), joint_attention_dim]
	TextIDs  []PosID
	Timestep float32 // the scheduler's timestep (0…1000)
}

// Forward returns the predicted velocity of the image tokens
// [len(ImageIDs), out_channels].
func (m *Transformer) Forward(ctx context.Context, in Inputs) ([]float32, error) {
	c := m.cfg
	ni, nt := len(in.ImageIDs), len(in.TextIDs)
	if ni == 0 || nt == 0 || len(in.Image) != ni*c.InChannels || len(in.Text) != nt*c.JointAttentionDim {
		return nil, fmt.Errorf("flux2: %d image values for %d tokens of %d, %d text values for %d tokens of %d",
			len(in.Image), ni, c.InChannels, len(in.Text), nt, c.JointAttentionDim)
	}
	s := m.be.NewStep(ctx)
	defer s.Close()
	eps := float32(c.Eps)

	// The timestep's embedding, and the modulations it gives every block.
	proj := TimestepEmbedding(ModelTimestep(in.Timestep), c.TimestepGuidanceChannels)
	temb := s.Linear(s.SiLU(s.Linear(s.Input(1, len(proj), proj), m.timeIn)), m.timeOut)
	act := s.SiLU(temb)
	mods := func(ws []backend.Weight) []backend.Array {
		out := make([]backend.Array, len(ws))
		for i, w := range ws {
			out[i] = s.Linear(act, w)
		}
		return out
	}
	modImg, modTxt, modSingle := mods(m.modImg[:]), mods(m.modTxt[:]), mods(m.modSingle[:])

	// Rotary tables of the joint sequence: text tokens, then image tokens.
	cosT, sinT := RoPETables(append(append([]PosID{}, in.TextIDs...), in.ImageIDs...), c.AxesDimsRoPE, float64(c.RoPETheta))
	hd := c.AttentionHeadDim
	cos, sin := s.Input(nt+ni, hd, cosT), s.Input(nt+ni, hd, sinT)
	txtRows, imgRows := span(0, nt), span(nt, nt+ni)

	img := s.Linear(s.Input(ni, c.InChannels, in.Image), m.xEmbed)
	txt := s.Linear(s.Input(nt, c.JointAttentionDim, in.Text), m.ctxEmbed)
	attention := func(q, k, v backend.Array) backend.Array {
		q, k = s.RoPETable(q, cos, sin), s.RoPETable(k, cos, sin)
		return s.EncoderAttention(q, k, v, c.NumAttentionHeads, float32(1/math.Sqrt(float64(hd))), []int{nt + ni})
	}
	for _, b := range m.double {
		// mods: shift, scale, gate of the attention, then of the MLP.
		normImg, normTxt := s.Modulate(img, modImg[0], modImg[1], eps), s.Modulate(txt, modTxt[0], modTxt[1], eps)
		qkv := func(x backend.Array, st stream) (q, k, v backend.Array) {
			return s.RMSNorm(s.Linear(x, st.q), st.normQ, eps), s.RMSNorm(s.Linear(x, st.k), st.normK, eps), s.Linear(x, st.v)
		}
		iq, ik, iv := qkv(normImg, b.img)
		tq, tk, tv := qkv(normTxt, b.txt)
		a := attention(s.ConcatRows(tq, iq), s.ConcatRows(tk, ik), s.ConcatRows(tv, iv))
		img = s.Gate(img, s.Linear(s.Rows(a, imgRows), b.img.out), modImg[2])
		txt = s.Gate(txt, s.Linear(s.Rows(a, txtRows), b.txt.out), modTxt[2])
		ffn := func(x backend.Array, st stream, shift, scale, gate backend.Array) backend.Array {
			h := s.Modulate(x, shift, scale, eps)
			return s.Gate(x, s.Linear(s.SwiGLU(s.Linear(h, st.gate), s.Linear(h, st.up)), st.down), gate)
		}
		img = ffn(img, b.img, modImg[3], modImg[4], modImg[5])
		txt = ffn(txt, b.txt, modTxt[3], modTxt[4], modTxt[5])
	}
	x := s.ConcatRows(txt, img)
	for _, b := range m.single {
		mark := s.Mark()
		h := s.Modulate(x, modSingle[0], modSingle[1], eps)
		a := attention(s.RMSNorm(s.Linear(h, b.q), b.normQ, eps), s.RMSNorm(s.Linear(h, b.k), b.normK, eps), s.Linear(h, b.v))
		mlp := s.SwiGLU(s.Linear(h, b.gate), s.Linear(h, b.up))
		x = s.Gate(x, s.Add(s.Linear(a, b.outAttn), s.Linear(mlp, b.outMLP)), modSingle[2])
		x = s.Release(mark, x)
		if err := s.Eval(x); err != nil {
			return nil, err
		}
	}
	img = s.Modulate(s.Rows(x, imgRows), s.Linear(act, m.outShift), s.Linear(act, m.outScale), eps)
	return s.Read(s.Linear(img, m.projOut))
}

// span is the indices lo … hi−1.
func span(lo, hi int) []int {
	out := make([]int, hi-lo)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

// Denoise runs the distilled pipeline's loop from the packed latents
// in.Image: at every timestep of sched the transformer's velocity, then
// an Euler step. It returns the final packed latents (in.Timestep is not
// used). It stops between steps when ctx is done.
func (m *Transformer) Denoise(ctx context.Context, sched Schedule, in Inputs) ([]float32, error) {
	return m.denoise(ctx, sched, in, nil)
}

// denoise is Denoise calling after (when not nil) with each step done
// (from 1), the number of steps and the packed latents after it.
func (m *Transformer) denoise(ctx context.Context, sched Schedule, in Inputs, after func(step, steps int, x []float32)) ([]float32, error) {
	x := append([]float32(nil), in.Image...)
	for i, t := range sched.Timesteps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in.Image, in.Timestep = x, t
		v, err := m.Forward(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("flux2: step %d of %d: %w", i+1, len(sched.Timesteps), err)
		}
		sched.EulerStep(i, x, v)
		if after != nil {
			after(i+1, len(sched.Timesteps), x)
		}
	}
	return x, nil
}
