package runner

import (
	"errors"
	"fmt"
	"slices"

	"fusion/engine/sample"
)

// Sampling on a pipeline's last stage. The first stage's generation owns
// everything that decides a token (the sampler's parameters and random
// generator, the grammar matcher, the thinking budget, the token
// history); the last stage has the logits. Rather than sending a
// vocabulary of logits back every step, the first stage sends what the
// sampler needs with the step and gets the token back:
//
//   - once per sequence (its first step): the sampling parameters and the
//     prompt's length (StageSampler);
//   - every step: the ids of the step's rows (Tokens: the last stage's
//     copy of prompt + output, which the penalties read), and for a step
//     that ends in a sample the random generator's state and the
//     grammar's or thinking budget's allowed-token mask (StageDraw);
//   - back: the token, its logprob and top logprobs as the request asked,
//     and the generator's new state (StageDrawn), which the first stage's
//     sampler takes over.
//
// The last stage runs the same sample.Sampler over the same logits,
// history, mask and generator state, so the token is the one the first
// stage would have drawn: bit-identical to one node. A step may still
// ask for logits (StageDraw nil, or an answer with Logits): the first
// stage then samples itself, and since the generator state travels with
// each draw, the two ways mix freely.

// StageSampler asks the last stage to keep a sampler for a sequence.
type StageSampler struct {
	Params    sample.Params // Seed is unused: the state comes with each draw
	PromptLen int           // the first PromptLen tokens are the prompt
	// For a sequence opened from the prefix caches (Prefixer.Restore):
	// the tokens its restored positions hold, and its positions (its
	// first step has no MaxLen).
	Prefix []int
	MaxLen int
}

// StageDraw asks the last stage to sample a sequence's next token after
// this step.
type StageDraw struct {
	RNG  []byte        // the generator's state (nil for greedy parameters)
	Mask sample.Bitset // the allowed tokens (nil: all)
}

// StageResult is one sequence's answer to a step: its logits, or the
// token drawn on the last stage.
type StageResult struct {
	Logits []float32
	Drawn  *StageDrawn
}

// StageDrawn is a token drawn on the last stage.
type StageDrawn struct {
	sample.Result
	RNG []byte // the generator's state after the draw
	Err error  // the sampler's error (sample.ErrNoCandidates, ...)
}

// StageSamplers are the samplers a pipeline's last stage keeps for the
// sequences of one stream. Not safe for concurrent use.
type StageSamplers struct {
	seqs map[uint64]*stageSeqSampler
}

type stageSeqSampler struct {
	s         *sample.Sampler
	promptLen int
	hist      []int // prompt + output fed so far
	maxLen    int
}

// Step follows a step's tokens and draws what it asks, given the logits
// of each sequence's last new token (logits[i] for seqs[i]). A sequence
// without a sampler gets its logits back.
func (ss *StageSamplers) Step(seqs []StageSeq, logits [][]float32) ([]StageResult, error) {
	if len(logits) != len(seqs) {
		return nil, fmt.Errorf("runner: %d logits rows for %d sequences", len(logits), len(seqs))
	}
	out := make([]StageResult, len(seqs))
	for i, q := range seqs {
		st := ss.seqs[q.ID]
		if q.Sampler != nil {
			maxLen := q.MaxLen
			if maxLen == 0 { // opened by a Restore
				maxLen = q.Sampler.MaxLen
			}
			if st != nil || maxLen == 0 {
				return nil, fmt.Errorf("%w: sequence %d: a sampler comes with its first step only", errBadStage, q.ID)
			}
			if q.Sampler.PromptLen <= 0 || q.Sampler.PromptLen > maxLen || len(q.Sampler.Prefix) >= q.Sampler.PromptLen {
				return nil, fmt.Errorf("%w: sequence %d: prompt of %d tokens (%d restored) in %d positions", errBadStage, q.ID,
					q.Sampler.PromptLen, len(q.Sampler.Prefix), maxLen)
			}
			p := q.Sampler.Params
			p.Seed = nil
			s, err := sample.New(p, len(logits[i]))
			if err != nil {
				return nil, fmt.Errorf("%w: sequence %d: %v", errBadStage, q.ID, err)
			}
			for _, id := range q.Sampler.Prefix {
				if id < 0 || id >= len(logits[i]) {
					return nil, fmt.Errorf("%w: sequence %d: restored token %d out of the vocabulary of %d", errBadStage, q.ID, id, len(logits[i]))
				}
			}
			st = &stageSeqSampler{s: s, promptLen: q.Sampler.PromptLen, maxLen: maxLen, hist: slices.Clone(q.Sampler.Prefix)}
			if ss.seqs == nil {
				ss.seqs = map[uint64]*stageSeqSampler{}
			}
			ss.seqs[q.ID] = st
		}
		if st == nil {
			if q.Draw != nil {
				return nil, fmt.Errorf("%w: sequence %d: a draw without a sampler", errBadStage, q.ID)
			}
			out[i].Logits = logits[i]
			continue
		}
		if len(q.Tokens) != q.Len || len(st.hist)+q.Len > st.maxLen {
			return nil, fmt.Errorf("%w: sequence %d: %d token ids for %d rows (%d of %d positions held)", errBadStage, q.ID, len(q.Tokens), q.Len, len(st.hist), st.maxLen)
		}
		for _, id := range q.Tokens {
			if id < 0 || id >= len(logits[i]) {
				return nil, fmt.Errorf("%w: sequence %d: token %d out of the vocabulary of %d", errBadStage, q.ID, id, len(logits[i]))
			}
		}
		st.hist = append(st.hist, q.Tokens...)
		if q.Draw != nil { // else a prompt chunk short of its end: nothing to send back
			out[i].Drawn = st.draw(logits[i], q.Draw)
		}
	}
	return out, nil
}

func (st *stageSeqSampler) draw(logits []float32, d *StageDraw) *StageDrawn {
	if d.RNG != nil {
		if err := st.s.SetRNGState(d.RNG); err != nil {
			return &StageDrawn{Err: err}
		}
	}
	in := sample.Input{Logits: logits, Prompt: st.hist[:min(st.promptLen, len(st.hist))]}
	if len(st.hist) > st.promptLen {
		in.Output = st.hist[st.promptLen:]
	}
	if d.Mask != nil {
		in.Mask = d.Mask
	}
	res, err := st.s.Sample(in)
	out := &StageDrawn{Result: res, Err: err}
	if d.RNG != nil {
		out.RNG = st.s.RNGState()
	}
	return out
}

// Free forgets sequences.
func (ss *StageSamplers) Free(ids ...uint64) {
	for _, id := range ids {
		delete(ss.seqs, id)
	}
}

// errBadStage: a step's sampling fields do not fit the stream's state.
var errBadStage = errors.New("runner: bad pipeline step")

// IsBadStep reports whether err is StageSamplers.Step refusing a step
// (the sender's fault: a 4xx-like InvalidArgument on the wire).
func IsBadStep(err error) bool { return errors.Is(err, errBadStage) }

// stageDraw is what the last stage needs to draw g's next token after
// this step of tokens rows, or nil when the step ends a prompt chunk
// short of the end (no token follows it).
func (g *generation) stageDraw(tokens int) *StageDraw {
	if g.pendingLen() != tokens {
		return nil
	}
	d := &StageDraw{}
	switch m := g.mask().(type) {
	case nil:
	case sample.Bitset:
		d.Mask = m
	default: // a mask of another kind travels as the bitset it allows
		n := g.lm.model.VocabSize()
		b := sample.NewBitset(n)
		for id := range n {
			if m.Allowed(id) {
				b.Set(id)
			}
		}
		d.Mask = b
	}
	if !g.params.Greedy() {
		d.RNG = g.sampler.RNGState()
	}
	return d
}

// stageSampler is the sampler spec of g's pipeline sequence.
func (g *generation) stageSampler() *StageSampler {
	p := g.params
	p.StopTokenIDs = slices.Clone(p.StopTokenIDs)
	return &StageSampler{Params: p, PromptLen: len(g.prompt)}
}
