package whisper

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"fusion/engine/backend"
	"fusion/engine/ct2"
	"fusion/engine/tensor"
	"fusion/engine/tokenizer"
)

// ErrNotWhisper: the directory holds no CTranslate2 Whisper model, or one
// whose tensors do not fit together.
var ErrNotWhisper = errors.New("not a CTranslate2 Whisper model")

// Dims are a Whisper model's sizes, read from its tensors' shapes.
type Dims struct {
	Mels          int // log-mel bins the stem takes (80; 128 for large-v3)
	AudioCtx      int // encoder positions: 1500 for a 30-s window
	TextCtx       int // decoder positions: 448
	Width         int // d_model
	Heads         int
	EncoderLayers int
	DecoderLayers int
	FFN           int // the MLP's inner width
	Vocab         int // rows of the output projection
}

// Config is what the CTranslate2 converter writes to config.json beside
// model.bin.
type Config struct {
	AlignmentHeads   [][2]int `json:"alignment_heads"`
	LangIDs          []int    `json:"lang_ids"`
	SuppressIDs      []int    `json:"suppress_ids"`
	SuppressIDsBegin []int    `json:"suppress_ids_begin"`
}

// eps is the layer norms' epsilon (torch.nn.LayerNorm's default).
const eps = 1e-5

type norm struct{ w, b backend.Vector }

type attention struct {
	norm       norm
	q, k, v, o backend.Weight
}

type ffn struct {
	norm     norm
	up, down backend.Weight
}

type encoderLayer struct {
	attn attention
	mlp  ffn
}

type decoderLayer struct {
	self, cross attention
	mlp         ffn
}

// Model is a loaded Whisper model. It is safe for concurrent use: every
// transcription has its own step and cache.
type Model struct {
	Dims      Dims
	Config    Config
	Tokenizer *tokenizer.Tokenizer
	Tokens    Special

	be           backend.Backend
	file         *ct2.Model
	conv1, conv2 backend.Weight
	encPos       backend.Weight
	encoder      []encoderLayer
	encNorm      norm
	embed        backend.Weight
	decPos       backend.Weight
	decoder      []decoderLayer
	decNorm      norm
	proj         backend.Weight
	uploads      *backend.Uploads
	scale        float32
}

// Load reads dir's model.bin, config.json and tokenizer.json (the layout
// of a CTranslate2 conversion, e.g. faster-whisper's models) and puts the
// weights on be.
func Load(ctx context.Context, dir string, be backend.Backend) (*Model, error) {
	f, err := ct2.Open(filepath.Join(dir, "model.bin"))
	if err != nil {
		return nil, fmt.Errorf("whisper: %w", err)
	}
	if f.Spec != "WhisperSpec" {
		return nil, fmt.Errorf("whisper: %s: %w: spec %q", dir, ErrNotWhisper, f.Spec)
	}
	m := &Model{be: be, file: f, uploads: backend.NewUploads(be)}
	if data, err := os.ReadFile(filepath.Join(dir, "config.json")); err != nil {
		return nil, fmt.Errorf("whisper: %w", err)
	} else if err := json.Unmarshal(data, &m.Config); err != nil {
		return nil, fmt.Errorf("whisper: %s: config.json: %w", dir, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("whisper: %w", err)
	}
	if m.Tokenizer, err = tokenizer.FromJSON(data); err != nil {
		return nil, fmt.Errorf("whisper: %s: tokenizer.json: %w", dir, err)
	}
	if err := m.load(ctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("whisper: %s: %w", dir, err)
	}
	for _, h := range m.Config.AlignmentHeads {
		if h[0] < 0 || h[0] >= m.Dims.DecoderLayers || h[1] < 0 || h[1] >= m.Dims.Heads {
			m.Close()
			return nil, fmt.Errorf("whisper: %s: %w: alignment head %v outside %d layers × %d heads", dir, ErrNotWhisper, h, m.Dims.DecoderLayers, m.Dims.Heads)
		}
	}
	if m.Tokens, err = specialTokens(m.Tokenizer, m.Dims.Vocab); err != nil {
		m.Close()
		return nil, fmt.Errorf("whisper: %s: %w", dir, err)
	}
	if m.Tokens.Multilingual {
		if m.Tokens.Languages, err = languages(m.Tokenizer, m.Config.LangIDs, m.Dims.Vocab); err != nil {
			m.Close()
			return nil, fmt.Errorf("whisper: %s: %w", dir, err)
		}
		if len(m.Tokens.Languages) == 0 {
			m.Close()
			return nil, fmt.Errorf("whisper: %s: %w: a multilingual vocabulary without lang_ids in config.json", dir, ErrNotWhisper)
		}
	}
	return m, nil
}

// loader uploads named tensors to m.uploads, which records the first
// error.
type loader struct {
	m *Model
	*backend.Uploads
}

func (l *loader) tensor(name string, shape ...int) (tensor.Tensor, bool) {
	t, ok := l.m.file.Tensor(name)
	if !ok {
		l.Fail(fmt.Errorf("%w: no tensor %s", ErrNotWhisper, name))
		return t, false
	}
	if len(t.Shape) != len(shape) {
		l.Fail(fmt.Errorf("%w: %s has shape %v, want %v", ErrNotWhisper, name, t.Shape, shape))
		return t, false
	}
	for i, n := range shape {
		if n >= 0 && t.Shape[i] != int64(n) {
			l.Fail(fmt.Errorf("%w: %s has shape %v, want %v", ErrNotWhisper, name, t.Shape, shape))
			return t, false
		}
	}
	return t, true
}

// data is the matrix at path/weight [out, in] with path/bias if bias.
func (l *loader) data(path string, out, in int, bias bool) (backend.WeightData, bool) {
	w, ok := l.tensor(path+"/weight", out, in)
	if !ok {
		return backend.WeightData{}, false
	}
	d := backend.WeightData{Name: path, Format: backend.Dense, Out: int(w.Shape[0]), In: int(w.Shape[1]), Data: w}
	if bias {
		b, ok := l.tensor(path+"/bias", d.Out)
		if !ok {
			return d, false
		}
		d.Bias = &b
	}
	return d, true
}

func (l *loader) linear(path string, out, in int, bias bool) backend.Weight {
	d, ok := l.data(path, out, in, bias)
	if !ok {
		return nil
	}
	return l.Weight(d)
}

// split uploads the fused projection at path as parts of the given row
// counts (CTranslate2 stores q, k and v, or k and v, as one matrix).
func (l *loader) split(path string, in int, rows ...int) []backend.Weight {
	total := 0
	for _, r := range rows {
		total += r
	}
	d, ok := l.data(path, total, in, true)
	out := make([]backend.Weight, len(rows))
	if !ok {
		return out
	}
	from := 0
	for i, r := range rows {
		part, err := backend.RowRange(d, from, from+r)
		if err != nil {
			l.Fail(err)
			return out
		}
		out[i] = l.Weight(part)
		from += r
	}
	return out
}

func (l *loader) vector(name string, n int) backend.Vector {
	t, ok := l.tensor(name, n)
	if !ok {
		return nil
	}
	return l.Vector(backend.VectorData{Name: name, Data: t})
}

func (l *loader) norm(path string) norm {
	return norm{l.vector(path+"/gamma", l.m.Dims.Width), l.vector(path+"/beta", l.m.Dims.Width)}
}

// conv uploads a convolution weight [out, in, kernel] transposed to the
// [out, kernel·in] layout Step.Conv1D takes.
func (l *loader) conv(path string, out, in, kernel int) backend.Weight {
	w, ok := l.tensor(path+"/weight", out, in, kernel)
	if !ok {
		return nil
	}
	b, ok := l.tensor(path+"/bias", out)
	if !ok {
		return nil
	}
	d, err := backend.ConvData(path, w, &b)
	if err != nil {
		l.Fail(fmt.Errorf("%w: %v", ErrNotWhisper, err))
		return nil
	}
	return l.Weight(d)
}

func (m *Model) dims() error {
	f := m.file
	shape := func(name string, rank int) []int64 {
		t, ok := f.Tensor(name)
		if !ok || len(t.Shape) != rank {
			return nil
		}
		return t.Shape
	}
	conv := shape("encoder/conv1/weight", 3)
	enc := shape("encoder/position_encodings/encodings", 2)
	dec := shape("decoder/position_encodings/encodings", 2)
	emb := shape("decoder/embeddings/weight", 2)
	up := shape("encoder/layer_0/ffn/linear_0/weight", 2)
	if conv == nil || enc == nil || dec == nil || emb == nil || up == nil || conv[2] != 3 {
		return fmt.Errorf("%w: missing or misshapen stem, position or embedding tensors", ErrNotWhisper)
	}
	heads, err := f.Int("encoder/num_heads")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotWhisper, err)
	}
	dh, err := f.Int("decoder/num_heads")
	if err != nil || dh != heads {
		return fmt.Errorf("%w: decoder heads %d (%v), encoder %d", ErrNotWhisper, dh, err, heads)
	}
	d := Dims{Mels: int(conv[1]), AudioCtx: int(enc[0]), TextCtx: int(dec[0]), Width: int(conv[0]), Heads: int(heads),
		FFN: int(up[0]), Vocab: int(emb[0])}
	for ; ; d.EncoderLayers++ {
		if _, ok := f.Tensor(fmt.Sprintf("encoder/layer_%d/ffn/linear_0/weight", d.EncoderLayers)); !ok {
			break
		}
	}
	for ; ; d.DecoderLayers++ {
		if _, ok := f.Tensor(fmt.Sprintf("decoder/layer_%d/ffn/linear_0/weight", d.DecoderLayers)); !ok {
			break
		}
	}
	if d.Heads <= 0 || d.Width%d.Heads != 0 || d.EncoderLayers == 0 || d.DecoderLayers == 0 || enc[1] != conv[0] || dec[1] != conv[0] || emb[1] != conv[0] {
		return fmt.Errorf("%w: sizes %+v", ErrNotWhisper, d)
	}
	// The decoder must be the standard one: GELU, pre-norm, embeddings
	// unscaled (flags the converter writes; absent flags are false).
	if act, err := f.Int("decoder/activation"); err != nil || act != 3 {
		return fmt.Errorf("%w: decoder activation %d (%v), want 3 (GELU)", ErrNotWhisper, act, err)
	}
	if v, err := f.Int("decoder/scale_embeddings"); err == nil && v != 0 {
		return fmt.Errorf("%w: scaled embeddings", ErrNotWhisper)
	}
	m.Dims = d
	m.scale = float32(1 / math.Sqrt(float64(d.Width/d.Heads)))
	return nil
}

func (m *Model) load(ctx context.Context) error {
	if err := m.dims(); err != nil {
		return err
	}
	d := m.Dims
	w := d.Width
	l := &loader{m: m, Uploads: m.uploads}
	m.conv1 = l.conv("encoder/conv1", w, d.Mels, 3)
	m.conv2 = l.conv("encoder/conv2", w, w, 3)
	m.encPos = l.Weight(l.matrixOf("encoder/position_encodings/encodings", d.AudioCtx, w))
	mlp := func(p string) ffn {
		return ffn{l.norm(p + "/layer_norm"), l.linear(p+"/linear_0", d.FFN, w, true), l.linear(p+"/linear_1", w, d.FFN, true)}
	}
	for i := range d.EncoderLayers {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := fmt.Sprintf("encoder/layer_%d", i)
		qkv := l.split(p+"/self_attention/linear_0", w, w, w, w)
		m.encoder = append(m.encoder, encoderLayer{
			attn: attention{norm: l.norm(p + "/self_attention/layer_norm"), q: qkv[0], k: qkv[1], v: qkv[2],
				o: l.linear(p+"/self_attention/linear_1", w, w, true)},
			mlp: mlp(p + "/ffn"),
		})
	}
	m.encNorm = l.norm("encoder/layer_norm")
	m.embed = l.Weight(l.matrixOf("decoder/embeddings/weight", d.Vocab, w))
	m.decPos = l.Weight(l.matrixOf("decoder/position_encodings/encodings", d.TextCtx, w))
	for i := range d.DecoderLayers {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := fmt.Sprintf("decoder/layer_%d", i)
		qkv := l.split(p+"/self_attention/linear_0", w, w, w, w)
		kv := l.split(p+"/attention/linear_1", w, w, w)
		m.decoder = append(m.decoder, decoderLayer{
			self: attention{norm: l.norm(p + "/self_attention/layer_norm"), q: qkv[0], k: qkv[1], v: qkv[2],
				o: l.linear(p+"/self_attention/linear_1", w, w, true)},
			cross: attention{norm: l.norm(p + "/attention/layer_norm"), q: l.linear(p+"/attention/linear_0", w, w, true),
				k: kv[0], v: kv[1], o: l.linear(p+"/attention/linear_2", w, w, true)},
			mlp: mlp(p + "/ffn"),
		})
	}
	m.decNorm = l.norm("decoder/layer_norm")
	// The output projection is the embedding table (an alias in the
	// file); with its own bias if the converter wrote one.
	proj, _ := l.data("decoder/projection", d.Vocab, w, false)
	if b, ok := m.file.Tensor("decoder/projection/bias"); ok {
		proj.Bias = &b
	}
	m.proj = l.Weight(proj)
	return l.Err()
}

// matrixOf is the 2-D tensor name as a dense weight without bias.
func (l *loader) matrixOf(name string, out, in int) backend.WeightData {
	t, _ := l.tensor(name, out, in)
	return backend.WeightData{Name: name, Format: backend.Dense, Out: out, In: in, Data: t}
}

// WeightBytes is the memory the backend holds for the weights.
func (m *Model) WeightBytes() int64 { return m.uploads.Bytes() }

// Close releases the weights on the backend.
func (m *Model) Close() error {
	m.uploads.Release()
	m.file = nil
	return nil
}

// IsModelDir reports whether dir holds a CTranslate2 Whisper model: a
// model.bin whose header names the WhisperSpec (only the first bytes
// are read).
func IsModelDir(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "model.bin"))
	if err != nil {
		return false
	}
	defer f.Close()
	const spec = "WhisperSpec"
	head := make([]byte, 4+2+len(spec)+1)
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	return binary.LittleEndian.Uint16(head[4:]) == uint16(len(spec)+1) && string(head[6:6+len(spec)]) == spec && head[len(head)-1] == 0
}
