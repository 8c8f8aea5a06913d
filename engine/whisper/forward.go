package whisper

import (
	"context"
	"fmt"
	"slices"

	"fusion/engine/backend"
)

// Window is one encoded 30-second window and a decoder over it: a step
// that holds the encoder output's cross-attention keys and values for
// every decoder layer, and the decoder's self-attention KV cache. A
// Window is used by one goroutine; Close frees it.
type Window struct {
	m      *Model
	s      backend.Step
	crossK []backend.Array
	crossV []backend.Array
	enc    backend.Array
	cache  backend.KVCache
	mark   backend.Mark
	pos    int // tokens in the cache
}

// Encode runs the encoder over mel, a window of Dims.Mels × 2·AudioCtx
// log-mel frames, mel-major (logmel.Features.Data of a 30-s window), and
// prepares the decoder's cross-attention over it.
func (m *Model) Encode(ctx context.Context, mel []float32) (*Window, error) {
	d := m.Dims
	frames := 2 * d.AudioCtx
	if len(mel) != d.Mels*frames {
		return nil, fmt.Errorf("whisper: %d feature values, want %d mels × %d frames", len(mel), d.Mels, frames)
	}
	cache, err := m.be.NewKVCache(backend.KVSpec{Layers: d.DecoderLayers, KVHeads: d.Heads, HeadDim: d.Width / d.Heads, MaxLen: d.TextCtx})
	if err != nil {
		return nil, fmt.Errorf("whisper: %w", err)
	}
	w := &Window{m: m, s: m.be.NewStep(ctx), cache: cache}
	if err := w.encode(ctx, mel); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

func (w *Window) encode(ctx context.Context, mel []float32) error {
	m, s, d := w.m, w.s, w.m.Dims
	frames := 2 * d.AudioCtx
	// Time along rows: the transpose of the mel-major features.
	x := make([]float32, len(mel))
	for c := range d.Mels {
		for t := range frames {
			x[t*d.Mels+c] = mel[c*frames+t]
		}
	}
	h := s.GELU(s.Conv1D(s.Input(frames, d.Mels, x), m.conv1, 3, 1, 1))
	h = s.GELU(s.Conv1D(h, m.conv2, 3, 2, 1))
	pos := make([]int32, d.AudioCtx)
	for i := range pos {
		pos[i] = int32(i)
	}
	h = s.Add(h, s.Embed(m.encPos, pos))
	for _, l := range m.encoder {
		if err := ctx.Err(); err != nil {
			return err
		}
		mark := s.Mark()
		a := l.attn
		n := s.LayerNorm(h, a.norm.w, a.norm.b, eps)
		// One sequence attending to itself without a mask: CrossAttention
		// of the window over itself (one matrix product per head).
		h = s.Add(h, s.Linear(s.CrossAttention(s.Linear(n, a.q), s.Linear(n, a.k), s.Linear(n, a.v), d.Heads, m.scale), a.o))
		h = s.Add(h, l.mlp.run(s, h))
		h = s.Release(mark, h)
		if err := s.Eval(h); err != nil {
			return err
		}
	}
	w.enc = s.LayerNorm(h, m.encNorm.w, m.encNorm.b, eps)
	for _, l := range m.decoder {
		w.crossK = append(w.crossK, s.Linear(w.enc, l.cross.k))
		w.crossV = append(w.crossV, s.Linear(w.enc, l.cross.v))
	}
	if err := s.Eval(append(append([]backend.Array{w.enc}, w.crossK...), w.crossV...)...); err != nil {
		return err
	}
	w.mark = s.Mark()
	return s.Err()
}

func (f ffn) run(s backend.Step, x backend.Array) backend.Array {
	return s.Linear(s.GELU(s.Linear(s.LayerNorm(x, f.norm.w, f.norm.b, eps), f.up)), f.down)
}

// EncoderOutput reads the encoder's output, [AudioCtx × Width] row-major.
func (w *Window) EncoderOutput() ([]float32, error) { return w.s.Read(w.enc) }

// Len is the number of tokens the decoder has seen.
func (w *Window) Len() int { return w.pos }

// Reset empties the decoder's cache, to decode the window again.
func (w *Window) Reset() {
	w.cache.Truncate(0)
	w.pos = 0
}

// Decode runs the decoder over tokens (appended after those it has seen)
// and returns the logits [len(rows) × Vocab] of the given rows of tokens.
func (w *Window) Decode(ctx context.Context, tokens []int, rows []int) ([]float32, error) {
	logits, _, err := w.decode(ctx, tokens, rows, nil)
	return logits, err
}

// decode is Decode that also reads the cross-attention queries of the
// decoder layers in queries ([len(tokens) × Width] each, by layer).
func (w *Window) decode(ctx context.Context, tokens []int, rows []int, queries []int) ([]float32, map[int][]float32, error) {
	m, s, d := w.m, w.s, w.m.Dims
	if len(tokens) == 0 || w.pos+len(tokens) > d.TextCtx {
		return nil, nil, fmt.Errorf("whisper: %d tokens after %d, the decoder holds %d", len(tokens), w.pos, d.TextCtx)
	}
	ids, pos := make([]int32, len(tokens)), make([]int32, len(tokens))
	for i, t := range tokens {
		if t < 0 || t >= d.Vocab {
			return nil, nil, fmt.Errorf("whisper: token %d outside the vocabulary [0, %d)", t, d.Vocab)
		}
		ids[i], pos[i] = int32(t), int32(w.pos+i)
	}
	for _, r := range rows {
		if r < 0 || r >= len(tokens) {
			return nil, nil, fmt.Errorf("whisper: logits of row %d of %d", r, len(tokens))
		}
	}
	batch := &backend.Batch{Seqs: []backend.Seq{{Cache: w.cache, Offset: w.pos, Len: len(tokens)}}}
	h := s.Add(s.Embed(m.embed, ids), s.Embed(m.decPos, pos))
	qs := map[int]backend.Array{}
	for i, l := range m.decoder {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		a := l.self
		n := s.LayerNorm(h, a.norm.w, a.norm.b, eps)
		h = s.Add(h, s.Linear(s.Attention(i, s.Linear(n, a.q), s.Linear(n, a.k), s.Linear(n, a.v), m.scale, batch), a.o))
		c := l.cross
		n = s.LayerNorm(h, c.norm.w, c.norm.b, eps)
		q := s.Linear(n, c.q)
		if slices.Contains(queries, i) {
			qs[i] = q
		}
		h = s.Add(h, s.Linear(s.CrossAttention(q, w.crossK[i], w.crossV[i], d.Heads, m.scale), c.o))
		h = s.Add(h, l.mlp.run(s, h))
	}
	h = s.LayerNorm(s.Rows(h, rows), m.decNorm.w, m.decNorm.b, eps)
	logits := s.Linear(h, m.proj)
	out, err := s.Read(logits)
	var qOut map[int][]float32
	if err == nil && len(qs) > 0 {
		qOut = map[int][]float32{}
		for i, q := range qs {
			if qOut[i], err = s.Read(q); err != nil {
				break
			}
		}
	}
	// Free the pass (the encoder output predates the mark and stays); a
	// Release forgets its mark, so take it again.
	s.Release(w.mark, w.enc)
	w.mark = s.Mark()
	if err != nil {
		return nil, nil, err
	}
	w.pos += len(tokens)
	return out, qOut, nil
}

// crossKeys reads decoder layer i's cross-attention keys over the
// window, [AudioCtx × Width].
func (w *Window) crossKeys(i int) ([]float32, error) { return w.s.Read(w.crossK[i]) }

// Close frees the window's step and cache.
func (w *Window) Close() {
	w.s.Close()
	w.cache.Free()
}
