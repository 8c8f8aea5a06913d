package piper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"fusion/engine/backend"
	"fusion/engine/onnx"
	"fusion/engine/tensor"
)

// ErrNotPiper is wrapped when a directory or file is not a Piper voice
// this package can run.
var ErrNotPiper = errors.New("piper: not a supported Piper voice")

// Text encoder hyper-parameters every Piper voice shares (VITS's
// attentions.Encoder as Piper trains it): the attention window and the
// layer norms' epsilon.
const (
	relWindow = 4
	normEps   = 1e-5
)

// Voice is a loaded Piper voice: its config and the weights of the VITS
// graph (text encoder, duration predictor, flow, HiFi-GAN decoder).
type Voice struct {
	Config *Config
	Dims   Dims

	be      backend.Backend
	uploads *backend.Uploads

	emb    backend.Weight // phoneme embedding [symbols, hidden]
	layers []encoderLayer
	projM  backend.Weight // proj rows [0, hidden): the prior's mean
	projS  backend.Weight // proj rows [hidden, 2·hidden): its log-scale

	dp   durationPredictor
	flow []coupling // in the order inference runs them
	dec  generator
}

// Dims are the sizes read from the weights' shapes.
type Dims struct {
	Hidden, Heads, HeadDim, Filter, FFNKernel, Layers int
}

type encoderLayer struct {
	q, k, v, o   backend.Weight
	relK, relV   []float32 // [2w+1, headDim]
	norm1, norm2 [2]backend.Vector
	ffn1, ffn2   backend.Weight
}

// Load reads the voice in dir (one *.onnx and its *.onnx.json) onto be.
func Load(ctx context.Context, dir string, be backend.Backend) (*Voice, error) {
	models, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if len(models) != 1 {
		return nil, fmt.Errorf("%w: %s holds %d .onnx files, want 1", ErrNotPiper, dir, len(models))
	}
	cfg, err := LoadConfig(models[0] + ".json")
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g, err := onnx.Open(models[0])
	if err != nil {
		return nil, err
	}
	v := &Voice{Config: cfg, be: be, uploads: backend.NewUploads(be)}
	l := &loader{v: v, g: g, Uploads: v.uploads}
	l.load()
	if err := l.Err(); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

// Bytes is the size of the weights on the backend.
func (v *Voice) Bytes() int64 { return v.uploads.Bytes() }

// Close releases the weights.
func (v *Voice) Close() error {
	v.uploads.Release()
	return nil
}

// loader uploads the graph's initializers to v.uploads, which records
// the first error.
type loader struct {
	v *Voice
	g *onnx.Model
	*backend.Uploads
}

// tensor returns the F32 initializer called name with the given shape
// (-1 matches any size).
func (l *loader) tensor(name string, shape ...int) (tensor.Tensor, bool) {
	if l.Err() != nil {
		return tensor.Tensor{}, false
	}
	t, ok := l.g.Initializer(name)
	if !ok {
		l.Fail(fmt.Errorf("%w: no weight %s", ErrNotPiper, name))
		return t, false
	}
	good := t.DType == tensor.F32 && len(t.Shape) == len(shape)
	for i := 0; good && i < len(shape); i++ {
		good = shape[i] < 0 || t.Shape[i] == int64(shape[i])
	}
	if !good {
		l.Fail(fmt.Errorf("%w: %s is %v %v, want F32 %v", ErrNotPiper, name, t.DType, t.Shape, shape))
		return t, false
	}
	return t, true
}

func (l *loader) vector(name string, n int) backend.Vector {
	t, ok := l.tensor(name, n)
	if !ok {
		return nil
	}
	return l.Vector(backend.VectorData{Name: name, Data: t})
}

// conv uploads the convolution path.weight [out, in, kernel] with
// path.bias. A kernel of 1 is a Linear ([out, in]).
func (l *loader) conv(path string, out, in, kernel int) backend.Weight {
	w, ok := l.tensor(path+".weight", out, in, kernel)
	if !ok {
		return nil
	}
	b, ok := l.tensor(path+".bias", out)
	if !ok {
		return nil
	}
	d, err := backend.ConvData(path, w, &b)
	if err != nil {
		l.Fail(err)
		return nil
	}
	return l.Weight(d)
}

func (l *loader) floats(name string, shape ...int) []float32 {
	t, ok := l.tensor(name, shape...)
	if !ok {
		return nil
	}
	f, err := tensor.Floats(t)
	if err != nil {
		l.Fail(err)
	}
	return f
}

func (l *loader) load() {
	v, g := l.v, l.g
	// The phoneme embedding is input 0 of the text encoder's Gather (the
	// exporter names it "sid").
	emb, ok := g.NodeInput("/enc_p/emb/Gather", 0)
	if !ok || len(emb.Shape) != 2 || emb.DType != tensor.F32 {
		l.Fail(fmt.Errorf("%w: no phoneme embedding (/enc_p/emb/Gather)", ErrNotPiper))
		return
	}
	d := &v.Dims
	d.Hidden = int(emb.Shape[1])
	if int(emb.Shape[0]) != v.Config.NumSymbols {
		l.Fail(fmt.Errorf("%w: embedding of %d symbols, config says %d", ErrNotPiper, emb.Shape[0], v.Config.NumSymbols))
		return
	}
	v.emb = l.Weight(backend.WeightData{Name: "enc_p.emb", Format: backend.Dense, Out: int(emb.Shape[0]), In: d.Hidden, Data: emb})
	for i := 0; ; i++ {
		if _, ok := g.Initializer(fmt.Sprintf("enc_p.encoder.attn_layers.%d.conv_q.weight", i)); !ok {
			d.Layers = i
			break
		}
	}
	rel, ok := g.Initializer("enc_p.encoder.attn_layers.0.emb_rel_k")
	ffn, ok2 := g.Initializer("enc_p.encoder.ffn_layers.0.conv_1.weight")
	if d.Layers == 0 || !ok || !ok2 || len(rel.Shape) != 3 || len(ffn.Shape) != 3 || rel.Shape[1] != 2*relWindow+1 {
		l.Fail(fmt.Errorf("%w: no text encoder layers of the expected shapes", ErrNotPiper))
		return
	}
	d.HeadDim = int(rel.Shape[2])
	if d.HeadDim <= 0 || d.Hidden%d.HeadDim != 0 {
		l.Fail(fmt.Errorf("%w: head width %d for hidden %d", ErrNotPiper, d.HeadDim, d.Hidden))
		return
	}
	d.Heads = d.Hidden / d.HeadDim
	d.Filter, d.FFNKernel = int(ffn.Shape[0]), int(ffn.Shape[2])
	if d.FFNKernel%2 != 1 {
		l.Fail(fmt.Errorf("%w: even FFN kernel %d", ErrNotPiper, d.FFNKernel))
		return
	}
	width := 2*relWindow + 1
	for i := range d.Layers {
		a := fmt.Sprintf("enc_p.encoder.attn_layers.%d.", i)
		f := fmt.Sprintf("enc_p.encoder.ffn_layers.%d.", i)
		n1 := fmt.Sprintf("enc_p.encoder.norm_layers_1.%d.", i)
		n2 := fmt.Sprintf("enc_p.encoder.norm_layers_2.%d.", i)
		v.layers = append(v.layers, encoderLayer{
			q: l.conv(a+"conv_q", d.Hidden, d.Hidden, 1), k: l.conv(a+"conv_k", d.Hidden, d.Hidden, 1),
			v: l.conv(a+"conv_v", d.Hidden, d.Hidden, 1), o: l.conv(a+"conv_o", d.Hidden, d.Hidden, 1),
			relK:  l.floats(a+"emb_rel_k", 1, width, d.HeadDim),
			relV:  l.floats(a+"emb_rel_v", 1, width, d.HeadDim),
			norm1: [2]backend.Vector{l.vector(n1+"gamma", d.Hidden), l.vector(n1+"beta", d.Hidden)},
			norm2: [2]backend.Vector{l.vector(n2+"gamma", d.Hidden), l.vector(n2+"beta", d.Hidden)},
			ffn1:  l.conv(f+"conv_1", d.Filter, d.Hidden, d.FFNKernel),
			ffn2:  l.conv(f+"conv_2", d.Hidden, d.Filter, d.FFNKernel),
		})
	}
	// proj [2·hidden, hidden, 1] → the prior's mean and log-scale, split
	// by rows so that each is its own product.
	pw, ok := l.tensor("enc_p.proj.weight", 2*d.Hidden, d.Hidden, 1)
	pb, ok2 := l.tensor("enc_p.proj.bias", 2*d.Hidden)
	if !ok || !ok2 {
		return
	}
	proj := backend.WeightData{Name: "enc_p.proj", Format: backend.Dense, Out: 2 * d.Hidden, In: d.Hidden, Bias: &pb,
		Data: tensor.Tensor{Name: pw.Name, DType: pw.DType, Shape: []int64{int64(2 * d.Hidden), int64(d.Hidden)}, Data: pw.Data}}
	for i, dst := range []*backend.Weight{&v.projM, &v.projS} {
		part, err := backend.RowRange(proj, i*d.Hidden, (i+1)*d.Hidden)
		if err != nil {
			l.Fail(err)
			return
		}
		*dst = l.Weight(part)
	}
	l.loadDurations()
	l.loadFlowAndDecoder()
}

// Encoded is the text encoder's output for one sentence, row-major
// [phonemes, hidden]: the hidden states (what the duration predictor
// reads) and the prior's mean and log-scale per phoneme.
type Encoded struct {
	Rows         int
	Hidden       []float32
	Mean, LogStd []float32
}

// MaxPhonemeIDs caps one sentence's ids (the attention is quadratic in
// it; piper-tts's sentences are far shorter).
const MaxPhonemeIDs = 4096

// EncodeText runs the text encoder (VITS's TextEncoder: embedding scaled
// by √hidden, post-norm transformer layers with relative-position
// attention and a convolutional FFN, projection to the prior's
// statistics) over one sentence's phoneme ids.
func (v *Voice) EncodeText(ctx context.Context, ids []int64) (*Encoded, error) {
	if len(ids) == 0 || len(ids) > MaxPhonemeIDs {
		return nil, fmt.Errorf("piper: %d phoneme ids, want 1 to %d", len(ids), MaxPhonemeIDs)
	}
	in := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= int64(v.Config.NumSymbols) {
			return nil, fmt.Errorf("piper: phoneme id %d outside [0, %d)", id, v.Config.NumSymbols)
		}
		in[i] = int32(id)
	}
	d := v.Dims
	s := v.be.NewStep(ctx)
	defer s.Close()
	x := s.Scale(s.Embed(v.emb, in), float32(math.Sqrt(float64(d.Hidden))))
	scale := float32(1 / math.Sqrt(float64(d.HeadDim)))
	width := 2*relWindow + 1
	pad := d.FFNKernel / 2
	for _, ly := range v.layers {
		mark := s.Mark()
		att := s.RelAttention(s.Linear(x, ly.q), s.Linear(x, ly.k), s.Linear(x, ly.v),
			s.Input(width, d.HeadDim, ly.relK), s.Input(width, d.HeadDim, ly.relV), d.Heads, scale)
		x = s.LayerNorm(s.Add(x, s.Linear(att, ly.o)), ly.norm1[0], ly.norm1[1], normEps)
		y := s.Conv1D(s.ReLU(s.Conv1D(x, ly.ffn1, d.FFNKernel, 1, pad)), ly.ffn2, d.FFNKernel, 1, pad)
		x = s.LayerNorm(s.Add(x, y), ly.norm2[0], ly.norm2[1], normEps)
		x = s.Release(mark, x)
	}
	m, ls := s.Linear(x, v.projM), s.Linear(x, v.projS)
	out := &Encoded{Rows: len(ids)}
	var err error
	if out.Hidden, err = s.Read(x); err != nil {
		return nil, err
	}
	if out.Mean, err = s.Read(m); err != nil {
		return nil, err
	}
	if out.LogStd, err = s.Read(ls); err != nil {
		return nil, err
	}
	return out, s.Err()
}

// IsVoiceDir reports whether dir holds one Piper voice (an .onnx file
// with its .onnx.json beside it).
func IsVoiceDir(dir string) bool {
	models, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if len(models) != 1 || !strings.HasSuffix(models[0], ".onnx") {
		return false
	}
	_, err := os.Stat(models[0] + ".json")
	return err == nil
}
