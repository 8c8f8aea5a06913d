package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"fusion/engine"
	"fusion/engine/modelfile"
	"fusion/engine/sample"
)

// Speculative decoding (backend_override "rapid"). A drafting sequence
// proposes k tokens before its decode step, from a draft model or by
// prompt lookup; the step feeds [pending token, drafts...] through the
// model in one forward with the logits of every row, and the positions
// are verified in order with the request's own sampler (sample.Verify),
// under the constraint and reasoning-budget masks of each position. The
// first rejected draft is replaced by the token verification drew; when
// all are kept the last row gives one more. The KV positions of rejected
// drafts are truncated away, in the model's sequence and in the draft's.

// Limits and defaults of speculative decoding.
const (
	// DefaultDraftTokens is how many tokens a draft proposes per step
	// when neither the model's settings nor Config say.
	DefaultDraftTokens = 4
	// MaxDraftTokens bounds num_draft_tokens (settings and Config).
	MaxDraftTokens = 16
	// Prompt lookup matches the last n tokens, n from DefaultLookupMax
	// down to DefaultLookupMin, against prompt+output.
	DefaultLookupMin = 1
	DefaultLookupMax = 3
	// MaxLookupNgram bounds Config.LookupMax.
	MaxLookupNgram = 16
	// draftTopK: a draft model draws among its most likely tokens only.
	draftTopK = 64
)

// ErrDraftModel is wrapped by the errors of CheckDraft: the draft model
// named in a model's settings cannot draft for it.
var ErrDraftModel = errors.New("unusable draft model")

// speculation is one generation's speculative decoding state, used only
// by its model's scheduler goroutine.
type speculation struct {
	k          int // most tokens to propose per step
	cur        int // tokens to propose next step (adapts, 1..k)
	nmin, nmax int // prompt lookup n-gram sizes

	// With a draft model: its sequence, how many of prompt+output it
	// holds, and a sampler of the request's parameters drawing the drafts.
	draft *draftModel
	dseq  sequence
	dlen  int
	dsmp  *sample.Sampler

	// This step's drafts and the distributions they were drawn from (nil
	// for prompt lookup, which proposes deterministically).
	drafts []int
	qs     []sample.Dist
}

// draftModel is a model's draft model: loaded with it, owned by its
// scheduler, closed with it.
type draftModel struct {
	name  string
	model languageModel
}

// newSpeculation sets up drafting for g, or returns nil when the model
// cannot verify (a pipeline's first stage: the later stages' KV cannot be
// rolled back from here).
func (r *Runner) newSpeculation(lm *loadedModel, params sample.Params) (*speculation, error) {
	if _, ok := lm.model.(*cpuModel); !ok {
		return nil, nil
	}
	set := lm.settings()
	sp := &speculation{k: r.cfg.DraftTokens, nmin: r.cfg.LookupMin, nmax: r.cfg.LookupMax, draft: lm.draft}
	if set.NumDraftTokens > 0 {
		sp.k = set.NumDraftTokens
	}
	sp.cur = sp.k
	if sp.draft != nil {
		dp := params
		if dp.Seed != nil {
			seed := *dp.Seed + 1 // its own stream, reproducible with the request's
			dp.Seed = &seed
		}
		dp.Logprobs, dp.TopLogprobs = false, 0
		// Any q keeps the output exact; the draft's best draftTopK
		// tokens keep drawing and verifying cheap on a large vocabulary.
		if dp.TopK == 0 || dp.TopK > draftTopK {
			dp.TopK = draftTopK
		}
		smp, err := sample.New(dp, sp.draft.model.VocabSize())
		if err != nil {
			return nil, err
		}
		sp.dsmp = smp
	}
	return sp, nil
}

// lookup is prompt-lookup drafting: the most recent earlier occurrence
// in prompt+output of its last n tokens (n from nmax down to nmin)
// proposes the up to k tokens that followed it.
func lookup(prompt, output []int, nmin, nmax, k int) []int {
	all := append(slices.Clip(prompt), output...)
	for n := min(nmax, len(all)-1); n >= nmin && n > 0; n-- {
		tail := all[len(all)-n:]
		for i := len(all) - n - 1; i >= 0; i-- {
			if slices.Equal(all[i:i+n], tail) {
				return slices.Clone(all[i+n : min(i+n+k, len(all))])
			}
		}
	}
	return nil
}

// propose fills the drafts of every running sequence that drafts and is
// at a decode step (one token pending).
func (s *scheduler) propose(ctx context.Context) {
	var viaModel []*generation
	for _, g := range s.running {
		sp := g.spec
		if sp == nil || g.busy {
			continue
		}
		sp.drafts, sp.qs = sp.drafts[:0], sp.qs[:0]
		if g.pendingLen() != 1 || g.ctx.Err() != nil {
			continue
		}
		// A step makes up to k+1 tokens; never draft past max_tokens.
		k := min(sp.cur, g.maxTokens-len(g.output)-1)
		if k <= 0 {
			continue
		}
		if sp.draft == nil {
			sp.drafts = lookup(g.prompt, g.output, sp.nmin, sp.nmax, k)
			continue
		}
		viaModel = append(viaModel, g)
	}
	if len(viaModel) > 0 {
		s.draftWithModel(ctx, viaModel)
	}
}

// draftWithModel runs the draft model for gens, batched: the first pass
// feeds what each draft sequence lacks of prompt+output (at most
// StepTokens; a longer catch-up drafts nothing this step), each later
// pass the previous draft, until each has its k drafts or drew a stop
// token. A failed pass leaves the drafts made so far.
func (s *scheduler) draftWithModel(ctx context.Context, gens []*generation) {
	dm := gens[0].spec.draft.model
	feed := make(map[*generation][]int, len(gens))
	want := make(map[*generation]int, len(gens))
	for _, g := range gens {
		sp := g.spec
		if sp.dseq == nil {
			seq, err := dm.NewSequence(len(g.prompt) + g.maxTokens)
			if err != nil {
				s.r.cfg.Logger.Warn("draft sequence", "model", s.name, "draft", sp.draft.name, "err", err)
				continue
			}
			sp.dseq, sp.dlen = seq, 0
		}
		full := append(slices.Clip(g.prompt), g.output...)
		feed[g] = full[sp.dlen:]
		want[g] = min(sp.cur, g.maxTokens-len(g.output)-1)
	}
	active := slices.DeleteFunc(slices.Clone(gens), func(g *generation) bool { return feed[g] == nil })
	for len(active) > 0 {
		inputs := make([]stepInput, 0, len(active))
		for _, g := range active {
			f := feed[g]
			if len(f) > s.r.cfg.StepTokens {
				f = f[:s.r.cfg.StepTokens]
			}
			inputs = append(inputs, stepInput{seq: g.spec.dseq, tokens: f})
		}
		logits, err := dm.Forward(ctx, inputs)
		for _, g := range active {
			s.account(g)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.r.cfg.Logger.Warn("draft step failed", "model", s.name, "draft", gens[0].spec.draft.name, "err", err)
			}
			return
		}
		next := active[:0]
		for i, g := range active {
			sp := g.spec
			sp.dlen += len(inputs[i].tokens)
			if len(inputs[i].tokens) < len(feed[g]) {
				continue // catching up on a long prompt: no drafts this step
			}
			in := sample.Input{Logits: logits[i], Prompt: g.prompt, Output: append(slices.Clip(g.output), sp.drafts...)}
			if len(sp.drafts) == 0 {
				// The first draft is at the sequence's current state: its
				// constraint or reasoning-budget mask applies (the later
				// ones are left to verification to reject).
				in.Mask = g.input(nil).Mask
			}
			res, q, err := sp.dsmp.Draw(in)
			if err != nil || res.ID >= s.model.VocabSize() {
				continue
			}
			sp.drafts = append(sp.drafts, res.ID)
			sp.qs = append(sp.qs, q)
			if len(sp.drafts) < want[g] && !res.Stop {
				feed[g] = []int{res.ID}
				next = append(next, g)
			}
		}
		active = next
	}
}

// verify takes the positions of g's drafting step in order: rows holds
// the model's logits after the pending token and after each draft. The
// events of the tokens taken are returned in order; done is set when the
// last one is final. accepted is the number of drafts kept.
func (g *generation) verify(rows []float32, vocab int) (evs []engine.Event, done bool, accepted int, err error) {
	sp := g.spec
	g.usage.DraftedTokens += len(sp.drafts)
	for i := 0; i <= len(sp.drafts); i++ {
		in := g.input(rows[i*vocab : (i+1)*vocab])
		var (
			res sample.Result
			ok  bool
		)
		if i < len(sp.drafts) {
			var q sample.Dist
			if sp.qs != nil {
				q = sp.qs[i]
			}
			res, ok, err = g.sampler.Verify(in, sp.drafts[i], q)
		} else {
			res, err = g.sampler.Sample(in)
		}
		if err != nil {
			return evs, true, accepted, err
		}
		if ok {
			accepted++
			g.usage.AcceptedTokens++
		}
		ev, d, err := g.take(res)
		if err != nil {
			return evs, true, accepted, err
		}
		evs = append(evs, ev)
		if d || !ok {
			return evs, d, accepted, nil
		}
	}
	return evs, false, accepted, nil
}

// settle rolls g's sequences back to what verification kept: the
// model's to the pending token plus the accepted drafts, the draft
// model's to what it holds of the new prompt+output.
func (s *scheduler) settle(g *generation, base, accepted int) {
	sp := g.spec
	if ts, ok := g.seq.(interface{ Truncate(int) }); ok {
		ts.Truncate(g.kvLen)
	}
	if sp.dseq != nil && len(sp.drafts) > 0 {
		// It holds prompt+output as it was and all drafts but the last.
		keep := base + min(accepted, len(sp.drafts)-1)
		if ds, ok := sp.dseq.(interface{ Truncate(int) }); ok && sp.dlen > keep {
			ds.Truncate(keep)
			sp.dlen = keep
		}
	}
	// Draft more while all are kept, fewer after a rejection (each
	// rejected draft is a row the step computed for nothing).
	if accepted == len(sp.drafts) {
		sp.cur = min(sp.cur+2, sp.k)
	} else {
		sp.cur = max(sp.cur-1, 1)
	}
	s.r.drafted.Add(int64(len(sp.drafts)))
	s.r.accepted.Add(int64(accepted))
	if c, ok := g.seq.(*cpuSequence); ok {
		alloc, _ := c.seq.CacheBytes()
		c.kvBytes.Store(alloc)
	}
	s.account(g)
}

// releaseDraft frees g's draft sequence (g is preempted or finished).
func (sp *speculation) releaseDraft() {
	if sp == nil || sp.dseq == nil {
		return
	}
	sp.dseq.Release()
	sp.dseq, sp.dlen = nil, 0
}

// CheckDraft reports whether draft can draft for target: both chat
// models of this node with the same vocabulary (every token the same
// string under the same id) and the same logits width. Errors wrap
// ErrDraftModel, or engine.ErrModelNotFound when one is not here.
func (r *Runner) CheckDraft(ctx context.Context, target, draft string) error {
	if target == draft {
		return fmt.Errorf("%w: %q cannot draft for itself", ErrDraftModel, draft)
	}
	var vocab [2]int
	var toks [2]interface {
		VocabSize() int
		Token(int) (string, bool)
	}
	for i, name := range []string{target, draft} {
		e, err := r.entry(name)
		if err != nil {
			return err
		}
		if e.info.Kind != engine.KindChat {
			return fmt.Errorf("%w: %q is an %s model", ErrDraftModel, name, e.info.Kind)
		}
		b, err := r.text(ctx, e)
		if err != nil {
			return fmt.Errorf("%w: %q: %v", ErrDraftModel, name, err)
		}
		toks[i] = b.Tokenizer()
		vocab[i] = modelVocab(e.info)
	}
	if vocab[0] != vocab[1] {
		return fmt.Errorf("%w: %q has a vocabulary of %d logits, %q of %d", ErrDraftModel, draft, vocab[1], target, vocab[0])
	}
	if toks[0].VocabSize() != toks[1].VocabSize() {
		return fmt.Errorf("%w: %q's tokenizer has %d tokens, %q's %d", ErrDraftModel, draft, toks[1].VocabSize(), target, toks[0].VocabSize())
	}
	for id := range toks[0].VocabSize() {
		a, _ := toks[0].Token(id)
		b, _ := toks[1].Token(id)
		if a != b {
			return fmt.Errorf("%w: %q and %q have different tokenizers (token %d is %q, not %q)", ErrDraftModel, draft, target, id, b, a)
		}
	}
	return nil
}

// checkDrafting validates the speculative decoding limits of Config.
func (c *Config) checkDrafting() error {
	switch {
	case c.DraftTokens < 1 || c.DraftTokens > MaxDraftTokens:
		return fmt.Errorf("runner: draft tokens %d must be in [1, %d]", c.DraftTokens, MaxDraftTokens)
	case c.LookupMin < 1 || c.LookupMax < c.LookupMin || c.LookupMax > MaxLookupNgram:
		return fmt.Errorf("runner: prompt lookup n-grams [%d, %d] must be within [1, %d], min ≤ max", c.LookupMin, c.LookupMax, MaxLookupNgram)
	}
	return nil
}

// modelVocab is the logits width config.json gives (0 when it cannot
// tell: a GGUF file, a bad config).
func modelVocab(info engine.ModelInfo) int {
	c, err := modelfile.LoadConfig(info.Path)
	if err != nil {
		return 0
	}
	return c.VocabSize
}

// draftBytes is what loading name's draft model adds (its files' size).
// Called with r.mu held.
func (r *Runner) draftBytes(name string) int64 {
	d := r.modelSettings(name).DraftModel
	if e, ok := r.models[d]; ok && d != "" {
		return estimateBytes(e.info.Path)
	}
	return 0
}

// loadDraft loads the draft model of target's settings for target's
// scheduler alone (it is not a pool entry: its bytes count in target's).
func (r *Runner) loadDraft(ctx context.Context, target, name string, tm languageModel) (*draftModel, error) {
	if err := r.CheckDraft(ctx, target, name); err != nil {
		return nil, fmt.Errorf("draft_model: %w", err)
	}
	e, err := r.entry(name)
	if err != nil {
		return nil, err
	}
	m, err := r.loader.load(e.info)
	if err != nil {
		return nil, fmt.Errorf("draft_model %s: %w", name, err)
	}
	if m.VocabSize() != tm.VocabSize() {
		return nil, errors.Join(fmt.Errorf("draft_model: %w: %q has %d logits, %q %d", ErrDraftModel, name, m.VocabSize(), target, tm.VocabSize()), m.Close())
	}
	r.cfg.Logger.Info("draft model loaded", "model", target, "draft", name, "weight_bytes", m.WeightBytes())
	return &draftModel{name: name, model: m}, nil
}

// verify finishes g's drafting step from its logits rows: the tokens
// taken go to the client in order, the sequences are rolled back to what
// was kept, and a final token retires g.
func (s *scheduler) verify(g *generation, rows []float32) {
	base := len(g.prompt) + len(g.output) // what the draft sequence held before the step
	evs, done, accepted, err := g.verify(rows, s.model.VocabSize())
	g.kvLen += accepted
	s.settle(g, base, accepted)
	if err != nil {
		s.remove(g)
		s.retire(g, &engine.Event{Done: true, Err: err}, false)
		return
	}
	last := len(evs)
	if done {
		last--
	}
	for _, ev := range evs[:last] {
		g.emit(ev)
	}
	if done {
		s.remove(g)
		s.retire(g, &evs[last], false)
	}
}
