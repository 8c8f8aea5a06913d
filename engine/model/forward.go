package model

import (
	"context"
	"errors"
	"fmt"

	"fusion/engine/backend"
)

// ErrBadInput: a Forward call's inputs do not fit the model or the
// sequences' state.
var ErrBadInput = errors.New("bad forward input")

// Input is one sequence's part of a forward step.
type Input struct {
	Seq *Sequence
	// Tokens are the new tokens: a prefill chunk, or one token when
	// decoding. The first stage (layers starting at 0) needs them; later
	// stages may give Len instead.
	Tokens []int
	// Len is the number of new tokens when Tokens is nil.
	Len int
	// AllLogits asks for the logits of every new token, not only the last.
	AllLogits bool
}

func (in Input) len() int {
	if in.Tokens != nil {
		return len(in.Tokens)
	}
	return in.Len
}

// Hidden is a hidden state handed between pipeline stages: one row of
// hidden_size values per new token of the batch, in input order. For
// Gemma 4 with per-layer inputs a row also carries, after them, the
// per-layer inputs of the layers still to run (HiddenCols): the next
// stage has no token embeddings to make them from.
type Hidden struct {
	Rows, Cols int
	Data       []float32
}

// Output is what a forward step produces.
type Output struct {
	// Hidden is the state after the last layer run, when that is not the
	// model's last layer.
	Hidden *Hidden
	// Logits, after the model's last layer: for each input, row-major
	// [n, vocab_size], n being 1 (its last new token) or, with AllLogits,
	// its number of new tokens.
	Logits [][]float32
}

// Forward runs layers (within the loaded ones; the zero Range means all
// loaded) over a batch of sequences, each at its own position with its
// own number of new tokens, all rows through each matrix product
// together. A range starting at layer 0 embeds the inputs' tokens;
// otherwise hidden (from the previous stage, rows in input order) is the
// input. A range ending at the model's last layer returns logits,
// otherwise the hidden state.
//
// Each sequence must hold the same number of positions in every layer of
// the range; the step appends its new tokens there. If Forward fails, the
// sequences are truncated back to where they were before the step.
func (m *Model) Forward(ctx context.Context, inputs []Input, layers Range, hidden *Hidden) (*Output, error) {
	if layers == (Range{}) {
		layers = m.Layers
	}
	batch, err := m.batch(inputs, layers, hidden)
	if err != nil {
		return nil, err
	}
	out, err := m.forward(ctx, inputs, layers, hidden, batch)
	if err != nil {
		for _, s := range batch.Seqs {
			s.Cache.Truncate(s.Offset)
		}
		return nil, fmt.Errorf("model: forward %v: %w", layers, err)
	}
	return out, nil
}

// batch checks the inputs and describes them for the backend.
func (m *Model) batch(inputs []Input, layers Range, hidden *Hidden) (*backend.Batch, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("model: %w: %s", ErrBadInput, fmt.Sprintf(format, args...))
	}
	if layers.Len() <= 0 || !m.Layers.contains(layers) {
		return nil, bad("layers %v outside the loaded %v", layers, m.Layers)
	}
	if len(inputs) == 0 {
		return nil, bad("no inputs")
	}
	b := &backend.Batch{Seqs: make([]backend.Seq, len(inputs))}
	seen := make(map[*Sequence]bool, len(inputs))
	for i, in := range inputs {
		n := in.len()
		switch {
		case in.Seq == nil || in.Seq.m != m:
			return nil, bad("input %d: no sequence of this model", i)
		case seen[in.Seq]:
			return nil, bad("input %d: sequence given twice", i)
		case n <= 0:
			return nil, bad("input %d: no new tokens", i)
		case layers.Start == 0 && in.Tokens == nil:
			return nil, bad("input %d: the first layer needs tokens", i)
		}
		seen[in.Seq] = true
		for _, t := range in.Tokens {
			if t < 0 || t >= m.Config.VocabSize {
				return nil, bad("input %d: token %d outside the vocabulary of %d", i, t, m.Config.VocabSize)
			}
		}
		if in.Seq.stale {
			return nil, fmt.Errorf("model: input %d: %w: truncated to a position other than 0", i, ErrNoRewind)
		}
		c := in.Seq.cache
		off := in.Seq.layerLen(layers.Start)
		if m.readsBefore(layers.Start, layers) {
			off -= n // its source ran this step already
			if off < 0 {
				return nil, bad("input %d: layer %d reads layer %d's KV, which holds %d positions, fewer than the %d new ones", i, layers.Start, m.kvFrom[layers.Start], off+n, n)
			}
		}
		for l := layers.Start; l < layers.End; l++ {
			if m.readsBefore(l, layers) {
				// A KV-shared layer whose source ran before the range:
				// the source already holds this step's positions.
				if got := in.Seq.layerLen(l); got != off+n {
					return nil, bad("input %d: layer %d reads layer %d's KV, which holds %d positions, not %d", i, l, m.kvFrom[l], got, off+n)
				}
				continue
			}
			if got := in.Seq.layerLen(l); got != off {
				return nil, bad("input %d: layer %d holds %d positions, layer %d holds %d", i, layers.Start, off, l, got)
			}
		}
		if off+n > c.Spec().MaxLen {
			return nil, bad("input %d: %d positions exceed the sequence's maximum of %d", i, off+n, c.Spec().MaxLen)
		}
		b.Seqs[i] = backend.Seq{Cache: c, Offset: off, Len: n}
	}
	if layers.Start > 0 {
		if cols := m.HiddenCols(layers.Start); hidden == nil || hidden.Rows != b.Rows() || hidden.Cols != cols || len(hidden.Data) != hidden.Rows*hidden.Cols {
			return nil, bad("layers %v need a hidden state of [%d, %d]", layers, b.Rows(), cols)
		}
	}
	return b, nil
}

// readsBefore reports whether layer l reads the KV of a layer before the
// range (a Gemma 4 KV-shared layer run in a later call of the same step
// than its source).
func (m *Model) readsBefore(l int, r Range) bool {
	return m.kvFrom != nil && m.kvFrom[l] < r.Start
}

func (m *Model) forward(ctx context.Context, inputs []Input, layers Range, hidden *Hidden, b *backend.Batch) (*Output, error) {
	s := m.be.NewStep(ctx)
	defer s.Close()
	x, f, err := m.run(ctx, s, inputs, layers, hidden, b)
	if err != nil {
		return nil, err
	}
	if layers.End < m.Config.NumHiddenLayers {
		if w := m.perLayerWidth(); w > 0 {
			// The later layers' inputs go on with the hidden state.
			from := (layers.End - f.perLayerFirst) * w
			x = s.HeadConcat(x, s.HeadSlice(f.perLayer, 1, from, f.perLayer.Cols()), 1)
		}
		data, err := s.Read(x)
		if err != nil {
			return nil, err
		}
		return &Output{Hidden: &Hidden{Rows: x.Rows(), Cols: x.Cols(), Data: data}}, nil
	}
	if m.head == nil {
		return nil, fmt.Errorf("%w: the model was loaded without its LM head", ErrBadInput)
	}
	return m.logits(s, x, inputs, b)
}

// run embeds the inputs (or takes hidden) and runs the layers of the
// range on step s, returning the residual stream after the last one and
// the frame it ran in.
func (m *Model) run(ctx context.Context, s backend.Step, inputs []Input, layers Range, hidden *Hidden, b *backend.Batch) (backend.Array, *frame, error) {
	f := &frame{Step: s, batch: b, eps: m.eps, rope: m.rope, scale: m.scale, perLayerFirst: layers.Start}
	var x backend.Array
	switch {
	case layers.Start == 0:
		x = m.embedTokens(s, inputs)
		if m.gemma4 != nil {
			f.perLayer = m.gemma4.perLayerInputs(s, tokenIDs(inputs), x, m.Config.HiddenSize, m.eps)
		}
	case m.perLayerWidth() > 0:
		// The previous stage's rows: the hidden state, then the per-layer
		// inputs of layers.Start on.
		in := s.Input(hidden.Rows, hidden.Cols, hidden.Data)
		h := m.Config.HiddenSize
		x, f.perLayer = s.HeadSlice(in, 1, 0, h), s.HeadSlice(in, 1, h, hidden.Cols)
	default:
		x = s.Input(hidden.Rows, hidden.Cols, hidden.Data)
	}
	if m.Recurrent() {
		f.rec, f.kvSlot = &recStep{}, m.kvSlot
		for _, in := range inputs {
			f.rec.seqs = append(f.rec.seqs, in.Seq)
		}
	}
	x, err := m.layers(ctx, f, x, layers, nil)
	if err == nil && f.rec != nil {
		f.rec.commit()
	}
	return x, f, err
}

// perLayerWidth is Gemma 4's per-layer input width (0: none).
func (m *Model) perLayerWidth() int {
	if g := m.Config.Gemma4; g != nil {
		return g.PerLayer
	}
	return 0
}

// HiddenCols is the width of a Hidden row handed to a stage starting at
// layer start: hidden_size, and for Gemma 4 with per-layer inputs the
// inputs of layers start … the last (per_layer_input width each).
func (m *Model) HiddenCols(start int) int {
	return m.Config.HiddenSize + (m.Config.NumHiddenLayers-start)*m.perLayerWidth()
}

// layers runs the layers of the range on f's step from x, calling after
// (when not nil) with each layer's output before the next starts, and
// returns the residual stream after the last one.
func (m *Model) layers(ctx context.Context, f *frame, x backend.Array, layers Range, after func(l int, x backend.Array) error) (backend.Array, error) {
	s := f.Step
	for l := layers.Start; l < layers.End; l++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f.layer = l
		if m.windows != nil {
			f.window = m.windows[l]
		}
		if m.ropes != nil && m.ropes[l] != nil {
			f.rope = m.ropes[l]
		} else {
			f.rope = m.rope
		}
		mark := s.Mark()
		x = s.Release(mark, m.blocks[l-m.Layers.Start].forward(f, x))
		if f.err != nil {
			return nil, f.err
		}
		if after != nil {
			if err := after(l, x); err != nil {
				return nil, err
			}
		}
	}
	return x, nil
}

// embedTokens embeds the inputs' tokens, one row each in input order.
func (m *Model) embedTokens(s backend.Step, inputs []Input) backend.Array {
	x := s.Embed(m.embed, tokenIDs(inputs))
	if m.embedScale != 0 {
		x = s.Scale(x, m.embedScale)
	}
	return x
}

// logits applies the final norm and the LM head to the rows that need
// logits and splits them per input.
func (m *Model) logits(s backend.Step, x backend.Array, inputs []Input, b *backend.Batch) (*Output, error) {
	var rows, counts []int
	row := 0
	for i, sq := range b.Seqs {
		first := sq.Len - 1
		if inputs[i].AllLogits {
			first = 0
		}
		for r := first; r < sq.Len; r++ {
			rows = append(rows, row+r)
		}
		counts = append(counts, sq.Len-first)
		row += sq.Len
	}
	logits := s.Linear(s.RMSNorm(s.Rows(x, rows), m.norm, m.eps), m.head)
	if m.softcap != 0 {
		logits = s.Softcap(logits, m.softcap)
	}
	data, err := s.Read(logits)
	if err != nil {
		return nil, err
	}
	vocab := logits.Cols()
	out := &Output{Logits: make([][]float32, len(inputs))}
	for i, n := range counts {
		out.Logits[i] = data[: n*vocab : n*vocab]
		data = data[n*vocab:]
	}
	return out, nil
}

// tokenIDs are the inputs' tokens, in input order.
func tokenIDs(inputs []Input) []int32 {
	var ids []int32
	for _, in := range inputs {
		for _, t := range in.Tokens {
			ids = append(ids, int32(t))
		}
	}
	return ids
}
