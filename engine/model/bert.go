package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
)

// BertConfig is what a BERT-family encoder's config.json says.
type BertConfig struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	IntermediateSize      int      `json:"intermediate_size"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	TypeVocabSize         int      `json:"type_vocab_size"`
	LayerNormEps          float64  `json:"layer_norm_eps"`
	HiddenAct             string   `json:"hidden_act"`
	PositionEmbeddingType string   `json:"position_embedding_type"`
	PadTokenID            int      `json:"pad_token_id"`
}

// EncoderTypes are the config.json model_type values of the encoders
// this package runs: BERT, and RoBERTa and XLM-RoBERTa (multilingual-e5,
// bge-m3), which differ from it in where positions start.
var EncoderTypes = []string{"bert", "roberta", "xlm-roberta"}

// IsEncoderType reports whether a config.json model_type is one of
// EncoderTypes.
func IsEncoderType(modelType string) bool { return slices.Contains(EncoderTypes, modelType) }

// PositionOffset is the position id of a sequence's first token: 0 for
// BERT; RoBERTa's positions start after its padding index (pad_token_id
// + 1, so 2 for XLM-R), as transformers' create_position_ids_from_input_ids
// numbers them.
func (c *BertConfig) PositionOffset() int {
	if c.ModelType == "bert" {
		return 0
	}
	return c.PadTokenID + 1
}

// ErrNotEncoder: config.json does not describe a BERT encoder.
var ErrNotEncoder = errors.New("not a BERT encoder")

// ReadBertConfig reads dir/config.json and checks that it describes a
// BERT encoder this package runs (absolute positions, GELU).
func ReadBertConfig(dir string) (*BertConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	c := &BertConfig{PositionEmbeddingType: "absolute", HiddenAct: "gelu", TypeVocabSize: 2, LayerNormEps: 1e-12, PadTokenID: -1}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("%w: config.json: %w", modelfile.ErrInvalidConfig, err)
	}
	if c.PadTokenID == -1 { // transformers' defaults
		c.PadTokenID = 0
		if c.ModelType != "bert" {
			c.PadTokenID = 1
		}
	}
	if !IsEncoderType(c.ModelType) {
		return nil, fmt.Errorf("%w: model_type %q", ErrNotEncoder, c.ModelType)
	}
	switch {
	case c.PositionEmbeddingType != "absolute":
		return nil, fmt.Errorf("%w: position_embedding_type %q (want absolute)", modelfile.ErrInvalidConfig, c.PositionEmbeddingType)
	case c.HiddenAct != "gelu":
		return nil, fmt.Errorf("%w: hidden_act %q (want gelu)", modelfile.ErrInvalidConfig, c.HiddenAct)
	case c.VocabSize <= 0, c.HiddenSize <= 0, c.NumHiddenLayers <= 0, c.IntermediateSize <= 0,
		c.MaxPositionEmbeddings <= 0, c.TypeVocabSize <= 0, c.NumAttentionHeads <= 0,
		c.HiddenSize%c.NumAttentionHeads != 0, c.LayerNormEps <= 0:
		return nil, fmt.Errorf("%w: sizes %+v", modelfile.ErrInvalidConfig, *c)
	case c.PadTokenID < 0 || c.PadTokenID >= c.VocabSize || c.PositionOffset() >= c.MaxPositionEmbeddings:
		return nil, fmt.Errorf("%w: pad_token_id %d with %d positions and %d tokens", modelfile.ErrInvalidConfig, c.PadTokenID, c.MaxPositionEmbeddings, c.VocabSize)
	}
	return c, nil
}

// Encoder is a BERT-family encoder (BERT, MiniLM, bge, e5, gte
// checkpoints; RoBERTa and XLM-RoBERTa ones such as multilingual-e5 and
// bge-m3): word + absolute position + token type embeddings, then
// post-norm layers of bidirectional attention and a GELU MLP. It returns
// the last hidden state of every token; pooling is the caller's.
type Encoder struct {
	Config *BertConfig

	be      backend.Backend
	weights *modelfile.Weights
	word    backend.Weight
	pos     backend.Weight
	types   backend.Weight
	embNorm layerNorm
	layers  []bertLayer
	eps     float32
	scale   float32
	bytes   int64
}

type layerNorm struct{ w, b backend.Vector }

type bertLayer struct {
	q, k, v, o backend.Weight
	attnNorm   layerNorm
	up, down   backend.Weight
	outputNorm layerNorm
}

// LoadEncoder loads the encoder of a model directory (config.json and
// safetensors; names with or without the "bert." or "roberta." prefix a
// task model such as BertForSequenceClassification puts on them) onto be.
func LoadEncoder(ctx context.Context, dir string, be backend.Backend, mmap bool) (*Encoder, error) {
	c, err := ReadBertConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", dir, err)
	}
	mode := safetensors.LoadRead
	if mmap {
		mode = safetensors.LoadMmap
	}
	ws, err := modelfile.OpenWeights(dir, mode)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	e := &Encoder{Config: c, be: be, weights: ws, eps: float32(c.LayerNormEps),
		scale: float32(1 / math.Sqrt(float64(c.HiddenSize/c.NumAttentionHeads)))}
	if err := e.load(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("model: %s: %w", dir, err), ws.Close())
	}
	return e, nil
}

func (e *Encoder) load(ctx context.Context) error {
	c := e.Config
	p := ""
	for _, prefix := range []string{"bert.", "roberta."} {
		if e.weights.Has(prefix + "embeddings.word_embeddings.weight") {
			p = prefix
		}
	}
	w := &loader{src: safetensorsSource{&modelfile.Model{Weights: e.weights, Config: &modelfile.Config{}}}, be: e.be,
		dims: dims{hidden: c.HiddenSize}}
	h, inter := c.HiddenSize, c.IntermediateSize
	linear := func(path string, out, in int) backend.Weight {
		x := w.linear(p + path)
		if x != nil && (x.Out() != out || x.In() != in) {
			w.fail(fmt.Errorf("%w: %s%s is [%d, %d], the config says [%d, %d]", ErrBadWeights, p, path, x.Out(), x.In(), out, in))
		}
		return x
	}
	norm := func(path string) layerNorm {
		return layerNorm{w.vector(p + path + ".weight"), w.vector(p + path + ".bias")}
	}
	e.word = linear("embeddings.word_embeddings", c.VocabSize, h)
	e.pos = linear("embeddings.position_embeddings", c.MaxPositionEmbeddings, h)
	e.types = linear("embeddings.token_type_embeddings", c.TypeVocabSize, h)
	e.embNorm = norm("embeddings.LayerNorm")
	for i := range c.NumHiddenLayers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := fmt.Sprintf("encoder.layer.%d.", i)
		e.layers = append(e.layers, bertLayer{
			q:          linear(l+"attention.self.query", h, h),
			k:          linear(l+"attention.self.key", h, h),
			v:          linear(l+"attention.self.value", h, h),
			o:          linear(l+"attention.output.dense", h, h),
			attnNorm:   norm(l + "attention.output.LayerNorm"),
			up:         linear(l+"intermediate.dense", inter, h),
			down:       linear(l+"output.dense", h, inter),
			outputNorm: norm(l + "output.LayerNorm"),
		})
	}
	e.bytes = w.bytes
	return w.err
}

// WeightBytes is the exact memory the backend holds for the weights.
func (e *Encoder) WeightBytes() int64 { return e.bytes }

// MaxLen is the longest sequence the position embeddings cover (for
// RoBERTa, those after the padding index: 512 of XLM-R's 514).
func (e *Encoder) MaxLen() int { return e.Config.MaxPositionEmbeddings - e.Config.PositionOffset() }

// Hidden is the width of a token's hidden state.
func (e *Encoder) Hidden() int { return e.Config.HiddenSize }

// Forward runs every sequence (token ids, token type 0) through the
// encoder in one batch and returns each sequence's last hidden state,
// [len(seq) × Hidden] row-major. Sequences attend only to themselves, so
// a sequence's output does not depend on the others.
func (e *Encoder) Forward(ctx context.Context, seqs [][]int) ([][]float32, error) {
	return e.ForwardTyped(ctx, seqs, nil)
}

// ForwardTyped is Forward with the token type id of every token (types[i]
// parallel to seqs[i]; nil: all 0), as a text pair has them.
func (e *Encoder) ForwardTyped(ctx context.Context, seqs, typeIDs [][]int) ([][]float32, error) {
	if typeIDs != nil && len(typeIDs) != len(seqs) {
		return nil, fmt.Errorf("model: %d type id lists for %d sequences", len(typeIDs), len(seqs))
	}
	var ids, positions, types []int32
	lens := make([]int, len(seqs))
	for i, seq := range seqs {
		if len(seq) == 0 || len(seq) > e.MaxLen() {
			return nil, fmt.Errorf("model: sequence %d has %d tokens (want 1 to %d)", i, len(seq), e.MaxLen())
		}
		ids, positions = e.appendPositions(ids, positions, seq)
		for _, id := range seq {
			if id < 0 || id >= e.Config.VocabSize {
				return nil, fmt.Errorf("model: sequence %d: token id %d is outside the vocabulary [0, %d)", i, id, e.Config.VocabSize)
			}
		}
		if typeIDs != nil {
			if len(typeIDs[i]) != len(seq) {
				return nil, fmt.Errorf("model: sequence %d has %d tokens and %d type ids", i, len(seq), len(typeIDs[i]))
			}
			for _, ty := range typeIDs[i] {
				if ty < 0 || ty >= e.Config.TypeVocabSize {
					return nil, fmt.Errorf("model: sequence %d: token type %d is outside [0, %d)", i, ty, e.Config.TypeVocabSize)
				}
				types = append(types, int32(ty))
			}
		}
		lens[i] = len(seq)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if typeIDs == nil {
		types = make([]int32, len(ids))
	}
	s := e.be.NewStep(ctx)
	defer s.Close()
	x := s.Add(s.Add(s.Embed(e.word, ids), s.Embed(e.pos, positions)), s.Embed(e.types, types))
	x = s.LayerNorm(x, e.embNorm.w, e.embNorm.b, e.eps)
	heads := e.Config.NumAttentionHeads
	for _, l := range e.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		mark := s.Mark()
		a := s.EncoderAttention(s.Linear(x, l.q), s.Linear(x, l.k), s.Linear(x, l.v), heads, e.scale, lens)
		x = s.LayerNorm(s.Add(s.Linear(a, l.o), x), l.attnNorm.w, l.attnNorm.b, e.eps)
		m := s.Linear(s.GELU(s.Linear(x, l.up)), l.down)
		x = s.LayerNorm(s.Add(m, x), l.outputNorm.w, l.outputNorm.b, e.eps)
		x = s.Release(mark, x)
	}
	out, err := s.Read(x)
	if err != nil {
		return nil, err
	}
	h := e.Hidden()
	res := make([][]float32, len(seqs))
	off := 0
	for i, n := range lens {
		res[i] = slices.Clone(out[off*h : (off+n)*h])
		off += n
	}
	return res, nil
}

// appendPositions appends the ids of seq and their position ids. BERT
// numbers tokens from 0. RoBERTa numbers the tokens that are not padding
// from its offset and gives a padding token the padding index itself,
// as create_position_ids_from_input_ids does (a <pad> id inside a
// sequence, which only token-id input can put there, takes no position).
func (e *Encoder) appendPositions(ids, positions []int32, seq []int) ([]int32, []int32) {
	off := e.Config.PositionOffset()
	next := off
	for j, id := range seq {
		ids = append(ids, int32(id))
		switch {
		case off == 0:
			positions = append(positions, int32(j))
		case id == e.Config.PadTokenID:
			positions = append(positions, int32(e.Config.PadTokenID))
		default:
			positions = append(positions, int32(next))
			next++
		}
	}
	return ids, positions
}

// Close releases the weight files.
func (e *Encoder) Close() error {
	if e.weights == nil {
		return nil
	}
	err := e.weights.Close()
	e.weights = nil
	return err
}
