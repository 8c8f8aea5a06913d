package sample

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"fusion/internal/race"
)

// ErrNoCandidates is returned when every token is masked, banned or has a
// -Inf or NaN logit.
var ErrNoCandidates = errors.New("sample: no token can be sampled")

// seedStream is the PCG stream (increment) of seeded generators.
const seedStream = 0x9e3779b97f4a7c15

// minExponent is the lowest (logit - max)/temperature kept: below it the
// weight exp(x), relative to the best token's 1, is under 2^-124, at the
// edge of the normal float32 range, and counts as zero.
const minExponent = -86

// Input is one step of one sequence.
type Input struct {
	// Logits is the model's output row, one value per token id. Sample
	// does not modify it.
	Logits []float32
	// Prompt and Output are the sequence's tokens so far: the prompt, and
	// the tokens generated after it. They feed the penalties.
	Prompt, Output []int
	// Mask, if not nil, restricts the tokens this step may produce.
	Mask Mask
}

// TokenLogprob is a token id and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float64
}

// Result is the outcome of one step.
type Result struct {
	ID   int  // the sampled token
	Stop bool // ID is one of Params.StopTokenIDs
	// Logprob is the log-probability of ID, set when Params.Logprobs is.
	Logprob float64
	// Top holds the Params.TopLogprobs most likely tokens, most likely
	// first (ties: lower id first); fewer if fewer tokens are possible.
	Top []TokenLogprob
}

// Sampler picks the next token of one sequence. It owns vocabulary-sized
// scratch buffers, allocated on first use and reused by later calls, and is
// not safe for concurrent use: make one per sequence.
type Sampler struct {
	vocab       int
	temperature float64
	topK        int
	topP        float64
	minP        float64
	logprobs    bool
	topLogprobs int
	stop        []int
	pen         penalties
	src         *rand.PCG // rng's source, whose state RNGState exports
	rng         *rand.Rand

	work  []float32 // transformed logits
	cands []cand
	top   []cand    // top-logprobs scratch
	qrow  []float64 // a draft's distribution by id (Verify's scratch)
}

// New returns a sampler for logits rows of vocabSize entries. It validates
// p (errors wrap ErrInvalidParams) and copies what it keeps of it.
func New(p Params, vocabSize int) (*Sampler, error) {
	if vocabSize <= 0 {
		return nil, fmt.Errorf("sample: vocabulary size %d must be > 0", vocabSize)
	}
	if err := p.ValidateVocab(vocabSize); err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	s := &Sampler{
		vocab:       vocabSize,
		temperature: p.Temperature,
		topK:        p.TopK,
		topP:        p.TopP,
		minP:        p.MinP,
		logprobs:    p.Logprobs,
		topLogprobs: p.TopLogprobs,
		stop:        slices.Clone(p.StopTokenIDs),
		pen:         newPenalties(p),
	}
	if p.Seed != nil {
		s.src = rand.NewPCG(uint64(*p.Seed), seedStream)
	} else {
		var b [16]byte
		_, _ = crand.Read(b[:]) // never fails: it crashes the program instead
		s.src = rand.NewPCG(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]))
	}
	s.rng = rand.New(s.src)
	return s, nil
}

// RNGState is the state of the sampler's random generator: another
// sampler of the same parameters given it by SetRNGState draws the same
// numbers from then on (a pipeline's last stage samples for the first
// stage's sampler that way, and hands the state back).
func (s *Sampler) RNGState() []byte {
	b, _ := s.src.MarshalBinary() // never fails
	return b
}

// SetRNGState sets the random generator to a state RNGState returned.
func (s *Sampler) SetRNGState(b []byte) error {
	if err := s.src.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("sample: random generator state: %w", err)
	}
	return nil
}

// Sample picks the next token from in.Logits. The transforms run in this
// order: mask, repetition penalty, presence and frequency penalties, logit
// bias, then either argmax (temperature 0) or temperature, top-k, softmax,
// top-p, min-p, renormalisation and one draw. Every non-greedy call takes
// exactly one number from the random generator.
func (s *Sampler) Sample(in Input) (Result, error) {
	src, err := s.transform(in)
	if err != nil {
		return Result{}, err
	}
	var id int
	if s.temperature == 0 {
		src, id = s.greedy(src, in)
	} else {
		id = s.draw(src)
	}
	return s.result(src, id)
}

// transform checks the row and applies the penalties and logit bias, and
// the mask unless the greedy path can do without it (see greedy). The
// returned row is in.Logits itself or the sampler's work buffer.
func (s *Sampler) transform(in Input) ([]float32, error) {
	if len(in.Logits) != s.vocab {
		return nil, fmt.Errorf("sample: logits row has %d entries, want %d", len(in.Logits), s.vocab)
	}
	// The loops over the row below are //go:norace (see package race):
	// the row is declared read here, once; they write only the sampler's
	// own scratch.
	race.ReadRange(in.Logits)
	src := in.Logits
	if s.pen.changes(in.Prompt, in.Output) {
		src = s.scratch(in.Logits)
		if err := s.pen.apply(src, in.Prompt, in.Output); err != nil {
			return nil, fmt.Errorf("sample: %w", err)
		}
	}
	// Penalties and bias leave -Inf logits at -Inf, so masking after them
	// equals masking first. The greedy path masks the whole row only if it
	// needs to: when the argmax is rejected or log-probabilities are asked.
	if in.Mask != nil && (s.temperature > 0 || s.logprobs) {
		src = s.applyMask(src, in.Logits, in.Mask)
	}
	return src, nil
}

// greedy returns the argmax of the transformed row src under in's mask,
// and the row, masked now if the unmasked argmax was rejected.
func (s *Sampler) greedy(src []float32, in Input) ([]float32, int) {
	id := argmax(src)
	masked := in.Mask == nil || s.logprobs
	if !masked && id >= 0 && !in.Mask.Allowed(id) {
		src = s.applyMask(src, in.Logits, in.Mask)
		id = argmax(src)
	}
	return src, id
}

// result is the Result of choosing id from the transformed row src.
func (s *Sampler) result(src []float32, id int) (Result, error) {
	if id < 0 {
		return Result{}, ErrNoCandidates
	}
	r := Result{ID: id, Stop: slices.Contains(s.stop, id)}
	if s.logprobs {
		r.Logprob, r.Top = s.logprobsOf(src, id)
	}
	return r, nil
}

// scratch returns the sampler's work buffer holding a copy of logits.
func (s *Sampler) scratch(logits []float32) []float32 {
	if s.work == nil {
		s.work = make([]float32, s.vocab)
	}
	copy(s.work, logits)
	return s.work
}

// applyMask masks src, first copying it to the work buffer if it is the
// caller's row.
func (s *Sampler) applyMask(src, logits []float32, m Mask) []float32 {
	if &src[0] == &logits[0] {
		src = s.scratch(logits)
	}
	applyMask(src, m)
	return src
}

// draw samples from the transformed logits, or returns -1 if none is
// possible.
func (s *Sampler) draw(logits []float32) int {
	u := s.rng.Float64() // taken first so that every call takes one
	c, total := s.truncate(logits)
	return pick(c, u*total)
}

// truncate applies temperature, top-k, top-p and min-p and returns the
// surviving candidates with their unnormalised probabilities, and the sum
// of these.
//
//go:norace
func (s *Sampler) truncate(logits []float32) ([]cand, float64) {
	c, total := s.weigh(logits)
	if len(c) == 0 || s.minP == 0 && s.topP == 1 {
		return c, total
	}
	if s.minP > 0 {
		// The best candidate weighs exp(0) = 1, so min-p is a fixed
		// threshold. Both min-p and top-p keep a prefix of the ranking, so
		// filtering min-p first leaves the same set and shrinks top-p's.
		c = slices.DeleteFunc(c, func(x cand) bool { return float64(x.v) < s.minP })
	}
	if s.topP < 1 {
		c = c[:nucleus(c, s.topP*total)]
	}
	return c, sumWeights(c)
}

// weigh applies temperature and top-k and returns the surviving candidates
// with weights exp((logit-max)/temperature), and the sum of the weights
// (the softmax denominator top-p is measured against). It reads the row
// transform declared and writes the sampler's candidates: uninstrumented,
// like every loop over the vocabulary here.
//
//go:norace
func (s *Sampler) weigh(logits []float32) ([]cand, float64) {
	invT := 1 / s.temperature
	if s.topK > 0 && s.topK < s.vocab {
		c := s.selectTopK(logits)
		m := negInf
		for _, x := range c {
			m = max(m, x.v)
		}
		total := 0.0
		n := 0
		for _, x := range c {
			e := (float64(x.v) - float64(m)) * invT
			if e < minExponent {
				continue
			}
			w := expNeg(e)
			total += w
			c[n] = cand{x.id, float32(w)}
			n++
		}
		return c[:n], total
	}

	m := float64(maxLogit(logits))
	if math.IsInf(m, -1) {
		return nil, 0
	}
	// Tokens clearly below the min-p threshold are not kept (truncate
	// applies the exact threshold to the weights). With top-p off they
	// need no weight at all; with top-p on they still count in its
	// denominator.
	keep := float64(minExponent)
	skip := keep
	if s.minP > 0 {
		keep = max(keep, math.Log(s.minP)-1e-6)
		if s.topP == 1 {
			skip = keep
		}
	}
	c := s.candidates(s.vocab)[:len(logits)]
	n := 0
	total := 0.0
	for i, v := range logits {
		e := (float64(v) - m) * invT
		if !(e >= skip) { // also drops -Inf and NaN
			continue
		}
		if e > 0 { // +Inf, with m clamped
			e = 0
		}
		w := expNeg(e)
		total += w
		if e >= keep {
			c[n] = cand{int32(i), float32(w)}
			n++
		}
	}
	return c[:n], total
}

// selectTopK returns the s.topK highest-ranked logits that are > -Inf, in no
// particular order.
//
//go:norace
func (s *Sampler) selectTopK(logits []float32) []cand {
	if s.topK <= heapTopKLimit {
		return topKHeap(logits, s.topK, s.candidates(s.topK))
	}
	c := s.candidates(s.vocab)
	for i, v := range logits {
		if v > negInf {
			c = append(c, cand{int32(i), clamp(v)})
		}
	}
	if len(c) > s.topK {
		selectTop(c, s.topK)
		c = c[:s.topK]
	}
	return c
}

// candidates returns the candidate buffer, empty, with capacity >= n.
func (s *Sampler) candidates(n int) []cand {
	if cap(s.cands) < n {
		s.cands = make([]cand, 0, n)
	}
	return s.cands[:0]
}

// logprobsOf returns the log-probability of id and the top alternatives in
// the distribution of logits at temperature 1, untruncated.
func (s *Sampler) logprobsOf(logits []float32, id int) (float64, []TokenLogprob) {
	m, logSum := logSumExp(logits)
	// (v - m) - logSum, not v - (m + logSum): the latter loses log-sum's
	// digits when m is large.
	logprob := func(v float32) float64 { return float64(clamp(v)) - m - logSum }
	lp := logprob(logits[id])
	if s.topLogprobs == 0 {
		return lp, nil
	}
	if s.top == nil {
		s.top = make([]cand, 0, MaxTopLogprobs)
	}
	s.top = topKHeap(logits, s.topLogprobs, s.top)
	slices.SortFunc(s.top, compareCands)
	top := make([]TokenLogprob, len(s.top))
	for i, x := range s.top {
		top[i] = TokenLogprob{ID: int(x.id), Logprob: logprob(x.v)}
	}
	return lp, top
}

// logSumExp returns the largest logit m (clamped) and log Σ exp(logit - m),
// computed stably in float64; log Σ exp(logits) is their sum. The row has
// at least one logit above -Inf.
//
//go:norace
func logSumExp(logits []float32) (m, logSum float64) {
	m = float64(maxLogit(logits))
	sum := 0.0
	for _, v := range logits {
		x := float64(v) - m
		if x > 0 { // +Inf, with m clamped
			x = 0
		}
		sum += expNeg(x) // 0 for -Inf and NaN
	}
	return m, math.Log(sum)
}
