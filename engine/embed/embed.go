package embed

import (
	"context"
	"errors"
	"fmt"
	"math"

	"fusion/engine/backend"
	"fusion/engine/model"
	"fusion/engine/tokenizer"
)

// Model is a loaded embedding model: tokenizer, encoder and pooling.
type Model struct {
	Config Config
	enc    *model.Encoder
	tok    *tokenizer.Tokenizer
}

// Load loads the embedding model of dir onto be.
func Load(ctx context.Context, dir string, be backend.Backend, mmap bool) (*Model, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	enc, err := model.LoadEncoder(ctx, dir, be, mmap)
	if err != nil {
		return nil, err
	}
	cfg, err := ReadConfig(dir, enc.MaxLen())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("embed: %s: %w", dir, err), enc.Close())
	}
	return &Model{Config: cfg, enc: enc, tok: tok}, nil
}

// Dimensions is the length of the model's vectors.
func (m *Model) Dimensions() int { return m.enc.Hidden() }

// WeightBytes is the memory the backend holds for the weights.
func (m *Model) WeightBytes() int64 { return m.enc.WeightBytes() }

// VocabSize is the number of token ids the encoder takes.
func (m *Model) VocabSize() int { return m.enc.Config.VocabSize }

// Tokenizer is the model's tokenizer.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// Close releases the weights.
func (m *Model) Close() error { return m.enc.Close() }

// Tokens turns an input (text, or token ids without special tokens) into
// the ids the encoder runs: special tokens added, cut to MaxSeqLen.
func (m *Model) Tokens(text string, ids []int) (out []int, truncated bool) {
	if ids != nil {
		return m.tok.WrapWithin(ids, m.Config.MaxSeqLen)
	}
	return m.tok.EncodeWithin(text, m.Config.MaxSeqLen)
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
	states, err := m.enc.Forward(ctx, seqs)
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
