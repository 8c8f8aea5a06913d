package model

import (
	"context"
	"fmt"

	"fusion/engine/backend"
	"fusion/engine/modelfile"
)

// padding describes a right-padded sequence for frame.attend: the first
// real.Rows() rows are the prompt, the rest padding.
type padding struct {
	real                    *backend.Batch
	heads, kvHeads, headDim int
	headDims                []int // per layer, when they differ (Model.headDims)
}

// attendPadded is attention under a padding mask over a right-padded
// sequence, as transformers builds it from an attention_mask of ones
// then zeros: the real rows attend causally (through the cache), every
// padding row to all the real positions and to nothing else — not to
// itself nor to the other padding rows. Both kinds of row were rotated
// at their own position.
func (f *frame) attendPadded(q, k, v backend.Array) backend.Array {
	p := f.padded
	n := p.real.Rows()
	realRows := span(0, n)
	rq, rk, rv := f.Rows(q, realRows), f.Rows(k, realRows), f.Rows(v, realRows)
	out := f.Attention(f.layer, rq, rk, rv, f.scale, p.real)
	if q.Rows() == n {
		return out
	}
	pq := f.Rows(q, span(n, q.Rows()))
	// CrossAttention has no grouped heads: each KV head's queries attend
	// to it on their own.
	group := p.heads / p.kvHeads
	hd := p.headDim
	if p.headDims != nil {
		hd = p.headDims[f.layer]
	}
	var pads backend.Array
	for j := range p.kvHeads {
		qj := f.HeadSlice(pq, 1, j*group*hd, (j+1)*group*hd)
		kj, vj := f.HeadSlice(rk, 1, j*hd, (j+1)*hd), f.HeadSlice(rv, 1, j*hd, (j+1)*hd)
		kg, vg := kj, vj
		for range group - 1 {
			kg, vg = f.HeadConcat(kg, kj, 1), f.HeadConcat(vg, vj, 1)
		}
		a := f.CrossAttention(qj, kg, vg, group, f.scale)
		if pads == nil {
			pads = a
		} else {
			pads = f.HeadConcat(pads, a, 1)
		}
	}
	return f.ConcatRows(out, pads)
}

// span is the indices lo … hi−1.
func span(lo, hi int) []int {
	out := make([]int, hi-lo)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

// ErrNotPaddable: PaddedStates supports the architectures whose layers
// attend through the plain causal path (Llama, Qwen2, Qwen3).
var ErrNotPaddable = fmt.Errorf("%w: padded states need a Llama, Qwen2 or Qwen3 model", ErrBadInput)

// PaddedStates runs one right-padded token sequence from position 0
// under a padding mask — its first real tokens are the prompt, the rest
// padding — and returns the hidden states after each layer count in
// after (transformers' output_hidden_states[a]: the residual stream after
// a layers; a = 0 is the embeddings), each row-major [len(tokens) ×
// hidden_size]. Padding rows sit at their own positions and attend to
// the real positions only, as transformers' causal mask combined with an
// attention_mask does; no state depends on how much padding follows.
// The model must start at layer 0 and hold every layer of after; the
// final norm is not applied (after = NumHiddenLayers is refused).
// A text encoder's use: FLUX.2 stacks a Qwen3's layers 9, 18 and 27.
func (m *Model) PaddedStates(ctx context.Context, tokens []int, real int, after []int) ([][]float32, error) {
	switch m.Config.Architecture {
	case modelfile.ArchLlama, modelfile.ArchQwen2, modelfile.ArchQwen3:
	default:
		return nil, fmt.Errorf("model: %w, not %s", ErrNotPaddable, m.Config.Architecture)
	}
	if m.windows != nil {
		return nil, fmt.Errorf("model: %w: sliding-window layers", ErrNotPaddable)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("model: padded states: %w: %s", ErrBadInput, fmt.Sprintf(format, args...))
	}
	if real <= 0 || real > len(tokens) {
		return nil, bad("%d real tokens of %d", real, len(tokens))
	}
	if m.Layers.Start != 0 {
		return nil, bad("layers %v do not start at 0", m.Layers)
	}
	last := 0
	for _, a := range after {
		if a < 0 || a > m.Layers.End || a >= m.Config.NumHiddenLayers {
			return nil, bad("states after %d layers: %v are loaded, the last one's are normed", a, m.Layers)
		}
		last = max(last, a)
	}
	seq, err := m.NewSequence(real)
	if err != nil {
		return nil, err
	}
	defer seq.Close()
	for i, t := range tokens {
		if t < 0 || t >= m.Config.VocabSize {
			return nil, bad("token %d (%d) outside the vocabulary of %d", i, t, m.Config.VocabSize)
		}
	}
	b := &backend.Batch{Seqs: []backend.Seq{{Cache: seq.cache, Offset: 0, Len: len(tokens)}}}
	pad := &padding{
		real:  &backend.Batch{Seqs: []backend.Seq{{Cache: seq.cache, Offset: 0, Len: real}}},
		heads: m.Config.NumAttentionHeads, kvHeads: m.kvHeads, headDim: m.headDim, headDims: m.headDims,
	}
	s := m.be.NewStep(ctx)
	defer s.Close()
	x := m.embedTokens(s, []Input{{Seq: seq, Tokens: tokens}})
	out := make([][]float32, len(after))
	keep := func(n int, x backend.Array) error {
		for i, a := range after {
			if a == n {
				data, err := s.Read(x)
				if err != nil {
					return err
				}
				out[i] = data
			}
		}
		return nil
	}
	if err := keep(0, x); err != nil {
		return nil, err
	}
	if last > 0 {
		f := &frame{Step: s, batch: b, eps: m.eps, rope: m.rope, scale: m.scale, padded: pad}
		if _, err := m.layers(ctx, f, x, Range{0, last}, func(l int, x backend.Array) error { return keep(l+1, x) }); err != nil {
			return nil, fmt.Errorf("model: padded states: %w", err)
		}
	}
	return out, nil
}
