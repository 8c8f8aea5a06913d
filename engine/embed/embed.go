package embed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/model"
	"fusion/engine/tokenizer"
)

// Model is a loaded embedding model: tokenizer, network and pooling.
type Model struct {
	Config Config
	net    network
	tok    *tokenizer.Tokenizer
}

// network is the transformer under the pooling: a BERT-family encoder,
// or a decoder of engine/model run for its final hidden states
// (Qwen3-Embedding).
type network struct {
	// states returns each sequence's last hidden states, row-major
	// [len(seq) × hidden].
	states                   func(ctx context.Context, seqs [][]int) ([][]float32, error)
	hidden, vocab, positions int
	bytes                    int64
	close                    func() error
}

// Load loads the embedding model of dir onto be: a BERT-family encoder
// when config.json's model_type is bert, roberta or xlm-roberta, else a decoder architecture of
// engine/model without its LM head.
func Load(ctx context.Context, dir string, be backend.Backend, mmap bool) (*Model, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	net, err := loadNetwork(ctx, dir, be, mmap)
	if err != nil {
		return nil, err
	}
	cfg, err := ReadConfig(dir, net.positions)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("embed: %s: %w", dir, err), net.close())
	}
	return &Model{Config: cfg, net: net, tok: tok}, nil
}

func loadNetwork(ctx context.Context, dir string, be backend.Backend, mmap bool) (network, error) {
	if model.IsEncoderType(modelType(dir)) {
		enc, err := model.LoadEncoder(ctx, dir, be, mmap)
		if err != nil {
			return network{}, err
		}
		return network{states: enc.Forward, hidden: enc.Hidden(), vocab: enc.Config.VocabSize, positions: enc.MaxLen(),
			bytes: enc.WeightBytes(), close: enc.Close}, nil
	}
	dec, err := model.Load(ctx, dir, be, model.Options{Mmap: mmap, NoHead: true})
	if err != nil {
		return network{}, err
	}
	c := dec.Config
	return network{states: dec.States, hidden: c.HiddenSize, vocab: c.VocabSize, positions: c.MaxPositionEmbeddings,
		bytes: dec.WeightBytes(), close: dec.Close}, nil
}

// Dimensions is the length of the model's vectors.
func (m *Model) Dimensions() int { return m.net.hidden }

// WeightBytes is the memory the backend holds for the weights.
func (m *Model) WeightBytes() int64 { return m.net.bytes }

// VocabSize is the number of token ids the network takes.
func (m *Model) VocabSize() int { return m.net.vocab }

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// Close releases the weights.
func (m *Model) Close() error { return m.net.close() }

// Tokens turns an input (text, or token ids without special tokens) into
// the ids the network runs: special tokens added, cut to MaxSeqLen.
func (m *Model) Tokens(text string, ids []int) (out []int, truncated bool) {
	if ids != nil {
		return m.tok.WrapWithin(ids, m.Config.MaxSeqLen)
	}
	return m.tok.EncodeWithin(text, m.Config.MaxSeqLen)
}

// Prompt is the text put before an input, as sentence-transformers'
// encode(prompt=..., prompt_name=...) puts it: prompt when set (even
// empty), else the model's prompt of that name (config_sentence_transformers.json),
// else its default prompt, else none.
func (m *Model) Prompt(name string, prompt *string) (string, error) {
	if prompt != nil {
		return *prompt, nil
	}
	if name == "" {
		name = m.Config.DefaultPrompt
		if name == "" {
			return "", nil
		}
	}
	p, ok := m.Config.Prompts[name]
	if !ok {
		names := slices.Sorted(maps.Keys(m.Config.Prompts))
		return "", fmt.Errorf("%w: the model has no prompt %q (it has %q)", ErrUnknownPrompt, name, names)
	}
	return p, nil
}

// Embed runs the token sequences (as Tokens makes them) through the
// encoder in one batch and pools each; dims > 0 keeps the first dims
// values (Matryoshka), then the vector is normalized if the model
// normalizes or was truncated.
func (m *Model) Embed(ctx context.Context, seqs [][]int, dims int) ([][]float32, error) {
	if err := m.CheckDimensions(dims); err != nil {
		return nil, err
	}
	out, err := m.Pool(ctx, seqs)
	if err != nil {
		return nil, err
	}
	for i, v := range out {
		out[i] = m.Output(v, dims)
	}
	return out, nil
}

// CheckDimensions checks a dims argument of Embed or Output.
func (m *Model) CheckDimensions(dims int) error {
	if dims < 0 || dims > m.Dimensions() {
		return fmt.Errorf("embed: dimensions %d outside [1, %d]", dims, m.Dimensions())
	}
	return nil
}

// Pool runs the token sequences through the encoder in one batch and
// returns each one's pooled vector, before any cut or normalization
// (Output's work): what a batch of requests asking for different
// dimensions can share.
func (m *Model) Pool(ctx context.Context, seqs [][]int) ([][]float32, error) {
	states, err := m.net.states(ctx, seqs)
	if err != nil {
		return nil, err
	}
	h := m.Dimensions()
	out := make([][]float32, len(seqs))
	for i, st := range states {
		out[i] = pool(m.Config.Pooling, st, h)
	}
	return out, nil
}

// Output turns a pooled vector into the embedding asked for: dims > 0
// (checked by CheckDimensions) keeps the first dims values, then the
// vector is normalized if the model normalizes or was cut. It works in
// place on v.
func (m *Model) Output(v []float32, dims int) []float32 {
	h := m.Dimensions()
	if dims > 0 && dims < h {
		v = v[:dims]
	}
	if m.Config.Normalize || (dims > 0 && dims < h) {
		normalize(v)
	}
	return v
}

// pool reduces rows×h token states to one vector of h.
func pool(p Pooling, states []float32, h int) []float32 {
	n := len(states) / h
	out := make([]float32, h)
	switch p {
	case PoolCLS:
		copy(out, states[:h])
	case PoolLastToken:
		copy(out, states[(n-1)*h:])
	default:
		sum := make([]float64, h)
		for r := range n {
			for j, x := range states[r*h : (r+1)*h] {
				sum[j] += float64(x)
			}
		}
		for j := range out {
			out[j] = float32(sum[j] / float64(n))
		}
	}
	return out
}

// normalize scales v to unit L2 length (a zero vector stays zero).
func normalize(v []float32) {
	var sq float64
	for _, x := range v {
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return
	}
	inv := 1 / math.Sqrt(sq)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
}
