package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"fusion/engine"
)

// scheduler is the continuous-batching step loop of one loaded model. It
// owns the model's forward pass: every step gathers the decode token of
// each running sequence and chunks of prompts (up to Config.StepTokens
// tokens in all) into one batched Forward, then samples each sequence
// that produced logits. Requests join (admission) and leave (finish,
// cancellation, preemption) between steps.
//
// The life of a sequence has three hook points, each in one place:
// admission in start (its KV cache is created there: a prefix cache
// would fill it and advance kvLen), prefill in plan/step (pending prompt
// tokens go through Forward in chunks), and the end in retire (KV freed,
// slot released, final event sent).
type scheduler struct {
	r      *Runner
	name   string
	model  languageModel
	block  int   // KV cache growth unit, in positions
	perTok int64 // KV bytes per position
	// state is what a sequence holds whatever its length: the recurrent
	// state of the model's DeltaNet layers (on this node).
	state int64

	ctx    context.Context // cancelled by close: stops the loop and its forward
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu      sync.Mutex
	waiting []*generation // admitted, not running (new or preempted)
	stopped bool

	// Owned by the loop goroutine.
	running  []*generation
	orders   int64
	inflight []*flight // micro-batches launched, oldest first (launcher models)

	inFlightSteps atomic.Int64 // len(inflight), for tests and stats

	steps, sharedSteps, rows, maxBatch, preemptions, nWaiting atomic.Int64
}

type schedStats struct {
	waiting, steps, sharedSteps, rows, maxBatch, preemptions int64
}

func newScheduler(r *Runner, name string, m languageModel) *scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scheduler{r: r, name: name, model: m, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	s.block, s.perTok = m.KVBlock()
	s.block = max(s.block, 1)
	if st, ok := m.(interface{ StateBytes() int64 }); ok {
		s.state = st.StateBytes()
	}
	go s.loop()
	return s
}

func (s *scheduler) stats() schedStats {
	return schedStats{
		waiting: s.nWaiting.Load(), steps: s.steps.Load(), sharedSteps: s.sharedSteps.Load(),
		rows: s.rows.Load(), maxBatch: s.maxBatch.Load(), preemptions: s.preemptions.Load(),
	}
}

// poke wakes the loop if it sleeps.
func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// kvFor is the KV memory a sequence of n positions allocates, its
// recurrent state included.
func (s *scheduler) kvFor(n int) int64 {
	return int64((n+s.block-1)/s.block*s.block)*s.perTok + s.state
}

// submit queues an admitted generation.
func (s *scheduler) submit(g *generation) {
	g.started = time.Now()
	g.arrived = g.started
	g.arrivedStep = s.steps.Load()
	stop := context.AfterFunc(g.ctx, s.poke) // cancellation wakes the loop
	g.unwatch = func() { stop() }
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.retire(g, &engine.Event{Done: true, Err: fmt.Errorf("%w: %s was unloaded", engine.ErrUnavailable, s.name)}, false)
		return
	}
	s.waiting = append(s.waiting, g)
	s.nWaiting.Store(int64(len(s.waiting)))
	s.mu.Unlock()
	s.poke()
}

// close stops the loop; generations still queued or running fail.
func (s *scheduler) close() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
}

func (s *scheduler) loop() {
	defer close(s.done)
	for {
		progressed := s.step()
		if s.ctx.Err() != nil {
			for len(s.inflight) > 0 { // cancelled with the loop: they end at once
				s.land(s.inflight[0])
			}
			s.shutdown()
			return
		}
		if !progressed {
			select {
			case <-s.wake:
			case <-s.ctx.Done():
			}
		}
	}
}

// shutdown fails what is left when the model is closed.
func (s *scheduler) shutdown() {
	s.mu.Lock()
	left := append(s.running, s.waiting...)
	s.running, s.waiting = nil, nil
	s.nWaiting.Store(0)
	s.mu.Unlock()
	for _, g := range left {
		if g.ctx.Err() != nil {
			s.retire(g, nil, true)
			continue
		}
		s.retire(g, &engine.Event{Done: true, Err: fmt.Errorf("%w: %s was unloaded", engine.ErrUnavailable, s.name)}, false)
	}
}

// step runs one scheduling round and at most one forward pass (or, for
// a model that launches micro-batches, one launch and at most one wait);
// it reports whether it did any work.
func (s *scheduler) step() bool {
	// Requests whose client went away leave at once (those in a
	// micro-batch in flight when it comes back).
	for _, g := range slices.Clone(s.running) {
		if g.ctx.Err() != nil && !g.busy {
			s.remove(g)
			s.retire(g, nil, true)
		}
	}
	for _, g := range s.admit(time.Now()) {
		s.start(g)
	}
	s.propose(s.ctx)
	if l, ok := s.model.(launcher); ok {
		return s.stepMicro(l)
	}
	inputs, gens := s.plan(0)
	if len(inputs) == 0 {
		return false
	}
	began := time.Now()
	ctx, stop := s.stepContext(gens)
	logits, err := s.model.Forward(ctx, inputs)
	// Read before stop, which cancels ctx in any case.
	stepCancelled := ctx.Err() != nil
	stop()
	s.finish(inputs, gens, logits, err, stepCancelled, began)
	return true
}

// launcher is a model whose steps can overlap: a pipeline's first stage
// (stage.go). Launch runs what this node computes of a step and sends the
// rest on; wait returns the step's logits (or draws, as Forward). Up to
// MicroBatches steps of disjoint sequences are in flight at once.
type launcher interface {
	Launch(ctx context.Context, inputs []stepInput) (wait func() ([][]float32, error), err error)
	MicroBatches() int
}

// flight is a micro-batch launched and not yet waited for.
type flight struct {
	inputs []stepInput
	gens   []*generation
	ctx    context.Context
	stop   func()
	wait   func() ([][]float32, error)
	began  time.Time
}

// stepMicro is step for a launcher: the running set is split into
// MicroBatches micro-batches (of at most ceil(running/k) sequences each),
// launched one after the other while fewer than k are in flight; once k
// are (or nothing else is ready), it waits for the oldest and takes its
// tokens. With k micro-batches and k stages every stage has one to work
// on: the first stage computes micro-batch i while the next computes i−1.
// A sequence is in one micro-batch at a time (busy), so its steps stay in
// order; greedy output is that of one step over the whole batch.
func (s *scheduler) stepMicro(l launcher) bool {
	k := max(l.MicroBatches(), 1)
	if len(s.inflight) < k {
		inputs, gens := s.plan((len(s.running) + k - 1) / k)
		if len(inputs) > 0 {
			f := &flight{inputs: inputs, gens: gens, began: time.Now()}
			f.ctx, f.stop = s.stepContext(gens)
			for _, g := range gens {
				g.busy = true
			}
			wait, err := l.Launch(f.ctx, inputs)
			if err != nil {
				wait = func() ([][]float32, error) { return nil, err }
			}
			f.wait = wait
			s.inflight = append(s.inflight, f)
			s.inFlightSteps.Store(int64(len(s.inflight)))
			if len(s.inflight) < k && s.ready() {
				return true // launch the next micro-batch before waiting
			}
		}
	}
	if len(s.inflight) == 0 {
		return false
	}
	s.land(s.inflight[0])
	return true
}

// land waits for the oldest micro-batch in flight and takes its results.
func (s *scheduler) land(f *flight) {
	s.inflight = s.inflight[1:]
	s.inFlightSteps.Store(int64(len(s.inflight)))
	logits, err := f.wait()
	stepCancelled := f.ctx.Err() != nil
	f.stop()
	for _, g := range f.gens {
		g.busy = false
	}
	s.finish(f.inputs, f.gens, logits, err, stepCancelled, f.began)
}

// ready reports whether a running sequence outside the micro-batches in
// flight has work for a step.
func (s *scheduler) ready() bool {
	for _, g := range s.running {
		if !g.busy && g.pendingLen() > 0 && g.ctx.Err() == nil {
			return true
		}
	}
	return false
}

// finish takes one step's results: the KV and prefix-cache accounting,
// then each sequence's token (or its end); a failed step ends its
// sequences.
func (s *scheduler) finish(inputs []stepInput, gens []*generation, logits [][]float32, err error, stepCancelled bool, began time.Time) {
	rows := 0
	for i, g := range gens {
		s.account(g)
		rows += len(inputs[i].tokens)
	}
	s.r.cfg.Logger.Debug("step", "model", s.name, "sequences", len(gens), "rows", rows, "took", time.Since(began))
	s.steps.Add(1)
	if len(gens) > 1 {
		s.sharedSteps.Add(1)
	}
	s.rows.Add(int64(rows))
	for {
		m := s.maxBatch.Load()
		if int64(len(gens)) <= m || s.maxBatch.CompareAndSwap(m, int64(len(gens))) {
			break
		}
	}
	if err != nil {
		if stepCancelled {
			// Closing (shutdown fails them), or every client of the
			// step went away (the next step retires them).
			return
		}
		for _, g := range gens {
			s.remove(g)
			s.retire(g, &engine.Event{Done: true, Err: err}, false)
		}
		return
	}
	for i, g := range gens {
		drawn := g.drawn
		g.drawn = nil
		before := g.kvLen
		drafting := inputs[i].all
		if drafting {
			g.kvLen++ // the pending token; the drafts' positions are settled below
		} else {
			g.kvLen += len(inputs[i].tokens)
		}
		if before < len(g.prompt) && len(g.output) == 0 && (g.kvLen >= len(g.prompt) || g.crossedBlock(before, g.kvLen)) {
			// The prompt is in (or, for a model with recurrent layers, a
			// chunk ended on a block while the state is there): its new
			// blocks go to the prefix cache.
			g.usage.CacheWriteTokens += g.storePrefix(g.seq, g.prompt)
		}
		if g.pendingLen() > 0 || g.ctx.Err() != nil {
			continue // a prompt chunk short of the end, or leaving next step
		}
		if g.phases != nil && g.firstAt.IsZero() {
			g.firstAt = time.Now() // the first token's logits are out
		}
		if drafting {
			s.verify(g, logits[i])
			continue
		}
		var (
			ev   engine.Event
			done bool
			err  error
		)
		if drawn != nil {
			ev, done, err = g.takeDrawn(drawn)
		} else {
			ev, done, err = g.advance(logits[i])
		}
		switch {
		case err != nil:
			s.remove(g)
			s.retire(g, &engine.Event{Done: true, Err: err}, false)
		case done:
			s.remove(g)
			s.retire(g, &ev, false)
		default:
			g.emit(ev)
		}
	}
}

// stepContext is the context of one forward pass: cancelled when the
// model closes or when every request in the step has been cancelled, so
// a long prompt chunk whose client left stops at the next layer instead
// of holding the model. (Sequences are rolled back by a failed Forward.)
func (s *scheduler) stepContext(gens []*generation) (context.Context, func()) {
	ctx, cancel := context.WithCancel(s.ctx)
	var live atomic.Int64
	live.Store(int64(len(gens)))
	stops := make([]func() bool, len(gens))
	for i, g := range gens {
		stops[i] = context.AfterFunc(g.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// aged reports whether g waited past the starvation bound.
func (s *scheduler) aged(g *generation, now time.Time, steps int64) bool {
	// The two fields, not a copy of the whole Config: its Models map
	// is SetModelSettings' to write (under settingsMu).
	maxWait, maxSteps := s.r.cfg.MaxWait, s.r.cfg.MaxWaitSteps
	return (maxWait > 0 && now.Sub(g.arrived) >= maxWait) ||
		(maxSteps > 0 && steps-g.arrivedStep >= int64(maxSteps))
}

// waitOrder is the admission order: requests past the starvation bound
// first, in arrival order whatever their class (under a steady stream of
// realtime work the realtime requests age too, and ordering the aged by
// class would starve a background request all the same), then the others
// by class, then by arrival (a preempted request keeps its arrival time,
// so it goes ahead of later ones of its class).
func waitOrder(a, b *generation) int {
	if a.aged != b.aged {
		if a.aged {
			return -1
		}
		return 1
	}
	if !a.aged {
		if c := cmp.Compare(a.prio, b.prio); c != 0 {
			return c
		}
	}
	return a.arrived.Compare(b.arrived)
}

// admit moves waiting requests into the running set while a node slot and
// KV memory for their first chunk are free, in waitOrder; a realtime
// request that does not fit preempts lower-class running sequences. It
// returns the admitted ones (not started yet) and retires the cancelled.
func (s *scheduler) admit(now time.Time) []*generation {
	var gone, admitted []*generation
	s.mu.Lock()
	s.waiting = slices.DeleteFunc(s.waiting, func(g *generation) bool {
		if g.ctx.Err() != nil {
			gone = append(gone, g)
			return true
		}
		return false
	})
	steps := s.steps.Load()
	for _, g := range s.waiting {
		g.aged = g.aged || s.aged(g, now, steps)
	}
	slices.SortStableFunc(s.waiting, waitOrder)
	var extra int64 // KV promised to this round's admissions
	for len(s.waiting) > 0 {
		g := s.waiting[0]
		need := s.kvFor(min(g.pendingLen(), s.r.cfg.StepTokens))
		if s.r.kvBytes.Load()+extra+need <= s.r.cfg.MaxKVBytes && s.r.takeSlot() {
			s.waiting = s.waiting[1:]
			extra += need
			admitted = append(admitted, g)
			continue
		}
		if g.prio != engine.PriorityRealtime {
			break
		}
		v := s.victim(func(v *generation) bool { return v.prio > g.prio && !v.aged })
		if v == nil {
			break
		}
		s.preemptLocked(v)
	}
	s.nWaiting.Store(int64(len(s.waiting)))
	s.mu.Unlock()
	for _, g := range gone {
		s.retire(g, nil, true)
	}
	return admitted
}

// victim picks the running sequence to preempt among those ok accepts:
// the lowest class, then the latest admitted (the least work lost).
func (s *scheduler) victim(ok func(*generation) bool) *generation {
	var best *generation
	for _, g := range s.running {
		if g.busy || !ok(g) {
			continue
		}
		if best == nil || g.prio > best.prio || (g.prio == best.prio && g.order > best.order) {
			best = g
		}
	}
	return best
}

// preemptLocked frees v's KV cache and slot and puts it back in the
// waiting queue; it will prefill its prompt and output again when
// readmitted (the result is bit-identical: chunked prefill gives the same
// logits as decoding). Called with s.mu held.
func (s *scheduler) preemptLocked(v *generation) {
	s.remove(v)
	s.freeSeq(v)
	s.preemptions.Add(1)
	s.waiting = append(s.waiting, v)
	slices.SortStableFunc(s.waiting, waitOrder)
	s.r.cfg.Logger.Debug("sequence preempted", "model", s.name, "request", v.id, "class", v.prio, "tokens", len(v.prompt)+len(v.output))
}

// start gives an admitted generation its KV cache and a place in the
// running set. (A prefix cache would fill the new sequence here and
// advance g.kvLen past the cached tokens.)
func (s *scheduler) start(g *generation) {
	seq, err := s.model.NewSequence(len(g.prompt) + g.maxTokens)
	if err != nil {
		s.r.running.Add(-1)
		s.retire(g, &engine.Event{Done: true, Err: err}, false)
		return
	}
	// The prefix cache fills what it holds of the prompt; only the rest
	// goes through prefill.
	cached := g.restorePrefix(g.ctx, seq)
	if len(g.output) == 0 {
		g.usage.CachedTokens = cached
	}
	g.seq, g.kvLen = seq, cached
	if g.phases != nil && g.runAt.IsZero() {
		g.runAt = time.Now() // a preempted generation keeps its first start
	}
	s.orders++
	g.order = s.orders
	s.running = append(s.running, g)
}

// plan picks this step's inputs: one decode token of every running
// sequence that has one, then prompt chunks in admission order
// (class first) with what is left of the step budget, trimmed to the KV
// memory limit. With limit > 0 it takes at most limit sequences (a
// micro-batch); sequences in a micro-batch in flight are left out.
func (s *scheduler) plan(limit int) ([]stepInput, []*generation) {
	var (
		inputs   []stepInput
		gens     []*generation
		prefills []*generation
	)
	for _, g := range s.running {
		if g.busy || limit > 0 && len(gens) >= limit {
			continue
		}
		if g.pendingLen() == 1 {
			in := stepInput{seq: g.seq, tokens: g.pending(), gen: g}
			if g.spec != nil && len(g.spec.drafts) > 0 {
				// Verify the drafts: every row's logits.
				in.tokens = append(slices.Clip(in.tokens), g.spec.drafts...)
				in.all = true
			}
			inputs = append(inputs, in)
			gens = append(gens, g)
		} else if g.pendingLen() > 1 {
			prefills = append(prefills, g)
		}
	}
	slices.SortStableFunc(prefills, func(a, b *generation) int {
		if c := cmp.Compare(a.prio, b.prio); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	budget := max(s.r.cfg.StepTokens-len(inputs), minPrefillTokens)
	for _, g := range prefills {
		if budget <= 0 || limit > 0 && len(gens) >= limit {
			break
		}
		p := g.pending()
		n := min(len(p), budget)
		if e := g.snapshotEvery(); e > 0 {
			// A recurrent state is snapshotted where a chunk ends: end
			// one on the next snapshot boundary it would cross.
			n = min(n, e-g.kvLen%e)
		}
		if g.spec != nil {
			// The last token waits for the first drafting step, so the
			// first generated token is verified like the others.
			n = min(n, len(p)-1)
		}
		inputs = append(inputs, stepInput{seq: g.seq, tokens: p[:n], gen: g})
		gens = append(gens, g)
		budget -= n
	}
	// Keep the step within the KV memory limit: drop prompt chunks from
	// the end, then preempt the lowest-class latest sequence holding KV
	// (aged ones last); a sequence alone that outgrows the limit ends for
	// length.
	for len(inputs) > 0 {
		growth := int64(0)
		for i, in := range inputs {
			growth += max(s.kvFor(gens[i].kvLen+len(in.tokens))-in.seq.Bytes(), 0)
		}
		if s.r.kvBytes.Load()+growth <= s.r.cfg.MaxKVBytes {
			break
		}
		last := len(inputs) - 1
		switch {
		case gens[last].pendingLen() > 1: // a prompt chunk: it waits
			inputs, gens = inputs[:last], gens[:last]
		case len(s.inflight) > 0: // micro-batches in flight free or settle KV first
			inputs, gens = inputs[:last], gens[:last]
		case len(s.running) > 1:
			v := s.victim(func(g *generation) bool { return g.kvAcct > 0 && !g.aged })
			if v == nil {
				v = s.victim(func(g *generation) bool { return g.kvAcct > 0 })
			}
			if v == nil {
				v = s.victim(func(*generation) bool { return true })
			}
			s.mu.Lock()
			s.preemptLocked(v)
			s.nWaiting.Store(int64(len(s.waiting)))
			s.mu.Unlock()
			if i := slices.Index(gens, v); i >= 0 {
				inputs, gens = slices.Delete(inputs, i, i+1), slices.Delete(gens, i, i+1)
			}
		default:
			g := gens[last]
			inputs, gens = inputs[:last], gens[:last]
			ev := g.finishLength(engine.Event{}, "")
			s.remove(g)
			s.retire(g, &ev, false)
		}
	}
	return inputs, gens
}

// remove takes g out of the running set (if it is there).
func (s *scheduler) remove(g *generation) {
	if i := slices.Index(s.running, g); i >= 0 {
		s.running = slices.Delete(s.running, i, i+1)
	}
}

// account publishes g's KV allocation into the node's total.
func (s *scheduler) account(g *generation) {
	var b int64
	if g.seq != nil {
		b = g.seq.Bytes()
	}
	if g.spec != nil && g.spec.dseq != nil {
		b += g.spec.dseq.Bytes()
	}
	s.r.kvWatch.note(s.r.kvBytes.Add(b - g.kvAcct))
	g.kvAcct = b
}

// freeSeq releases g's KV cache and node slot, if it holds them.
func (s *scheduler) freeSeq(g *generation) {
	if g.seq == nil {
		return
	}
	g.seq.Release()
	g.seq = nil
	g.spec.releaseDraft()
	g.kvLen = 0
	s.account(g)
	s.r.running.Add(-1)
}

// retire is the end of a generation, whatever the reason: its KV and
// slot are freed, it leaves the node's in-flight count and the model's
// pool count, and only then is the final event (nil when the client went
// away) queued, so a client that saw it can count on the capacity.
func (s *scheduler) retire(g *generation, final *engine.Event, cancelled bool) {
	if g.seq != nil && final != nil && final.Err == nil && !g.lm.recurrent {
		// Keep the output's blocks too (what the KV cache holds of them;
		// not for recurrent layers, whose state is past all but the last).
		g.storePrefix(g.seq, append(slices.Clone(g.prompt), g.output...))
	}
	s.freeSeq(g)
	if g.unwatch != nil {
		g.unwatch()
	}
	s.r.inFlight.Add(-1)
	switch {
	case cancelled:
		s.r.cancelled.Add(1)
	case final != nil && final.Err == nil:
		s.r.noteDuration(time.Since(g.started))
		g.notePhases()
	}
	g.release()
	s.r.wakeAll()
	if final != nil {
		g.emit(*final)
	}
}
