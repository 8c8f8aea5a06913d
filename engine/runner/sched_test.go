package runner

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
)

// newRunnerWith writes the named demo models (each built once per test
// binary: demotest) and starts a runner over them.
func newRunnerWith(t *testing.T, cfg Config, models map[string]demo.Options) *Runner {
	t.Helper()
	dir := t.TempDir()
	for name, o := range models {
		demotest.Create(t, filepath.Join(dir, name), o)
	}
	cfg.ModelsDir = dir
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// run is one generation's outcome.
type run struct {
	ids   []int
	text  string
	final engine.Event
	ttft  time.Duration
	err   error
}

// generate runs req to the end, recording token ids and time to the
// first token.
func generate(ctx context.Context, r *Runner, req *engine.Request) run {
	start := time.Now()
	ch, err := r.Generate(ctx, req)
	if err != nil {
		return run{err: err}
	}
	return collectRun(ctx, start, ch)
}

// collectRun collects a generation started at start.
func collectRun(ctx context.Context, start time.Time, ch <-chan engine.Event) run {
	var out run
	for ev := range ch {
		if out.ttft == 0 && len(ev.Tokens) > 0 {
			out.ttft = time.Since(start)
		}
		for _, tl := range ev.Tokens {
			out.ids = append(out.ids, tl.ID)
		}
		out.text += ev.Text
		if ev.Done {
			out.final = ev
			out.err = ev.Err
			return out
		}
	}
	out.err = errors.New("stream closed without a final event")
	if ctx.Err() != nil {
		out.err = ctx.Err()
	}
	return out
}

var prompts = []string{"Hello", "Tell me a story about a fox", "2+2=", "Write a haiku on the sea, please"}

// TestBatchingMatchesAlone: greedy requests running together in shared
// steps produce exactly the tokens they produce alone (the batched
// forward is row-independent, so this is bit-identity, not a tolerance).
func TestBatchingMatchesAlone(t *testing.T) {
	r := newDemoRunner(t, Config{})
	ctx := context.Background()
	const n = 24
	alone := make([]run, len(prompts))
	for i, p := range prompts {
		if alone[i] = generate(ctx, r, chat("demo", p, n)); alone[i].err != nil || len(alone[i].ids) != n {
			t.Fatalf("alone %q: %d tokens, %v", p, len(alone[i].ids), alone[i].err)
		}
	}
	before := r.Stats()
	together := make([]run, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() { together[i] = generate(ctx, r, chat("demo", p, n)) })
	}
	wg.Wait()
	for i := range prompts {
		if together[i].err != nil || !slices.Equal(together[i].ids, alone[i].ids) || together[i].text != alone[i].text {
			t.Errorf("%q batched: %v %v, alone %v", prompts[i], together[i].ids, together[i].err, alone[i].ids)
		}
	}
	after := r.Stats()
	shared := after.SharedSteps - before.SharedSteps
	steps := after.Steps - before.Steps
	t.Logf("4 requests × %d tokens: %d steps, %d of them shared, max batch %d", n, steps, shared, after.MaxBatch)
	if shared == 0 || after.MaxBatch < 2 || steps >= int64(len(prompts)*(n+1)) {
		t.Errorf("concurrent requests did not share steps: %d steps, %d shared, max batch %d", steps, shared, after.MaxBatch)
	}
	if after.InFlight != 0 || after.Running != 0 || after.KVBytes != 0 {
		t.Errorf("after the runs: %+v", after)
	}
}

// TestPreemptedOutputUnchanged: a background sequence preempted by a
// realtime one (one slot) is re-prefilled later and still produces its
// greedy tokens exactly.
func TestPreemptedOutputUnchanged(t *testing.T) {
	r := newDemoRunner(t, Config{MaxRunning: 1})
	ctx := context.Background()
	const n = 60
	want := generate(ctx, r, chat("demo", prompts[1], n))
	if want.err != nil {
		t.Fatal(want.err)
	}
	bg := chat("demo", prompts[1], n)
	bg.Priority = engine.PriorityBackground
	ch, err := r.Generate(ctx, bg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for ev := range ch {
		for _, tl := range ev.Tokens {
			ids = append(ids, tl.ID)
		}
		if len(ids) == 5 { // running: now a realtime request arrives
			rt := chat("demo", prompts[0], 8)
			rt.Priority = engine.PriorityRealtime
			if got := generate(ctx, r, rt); got.err != nil || len(got.ids) != 8 {
				t.Fatalf("realtime: %d tokens, %v", len(got.ids), got.err)
			}
		}
		if ev.Done && ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	if !slices.Equal(ids, want.ids) {
		t.Errorf("preempted run %v\nalone %v", ids, want.ids)
	}
	if st := r.Stats(); st.Preemptions == 0 {
		t.Errorf("no preemption happened: %+v", st)
	}
}

// TestRealtimeTTFTUnderLoad: with every slot taken by background
// requests (and more queued), a realtime request's time to first token
// stays within 3× the idle node's plus 500 ms (medians of 5; the slack
// absorbs a machine shared with other work). Without preemption it would
// wait for a background request's 3000 tokens.
func TestRealtimeTTFTUnderLoad(t *testing.T) {
	opts := demo.Options{Arch: "qwen3", Layers: 4, Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 768, Seed: 3}
	r := newRunnerWith(t, Config{MaxRunning: 4, Threads: 2}, map[string]demo.Options{"m": opts})
	ctx := context.Background()
	rt := func() time.Duration {
		req := chat("m", prompts[3], 4)
		req.Priority = engine.PriorityRealtime
		got := generate(ctx, r, req)
		if got.err != nil {
			t.Fatal(got.err)
		}
		return got.ttft
	}
	rt() // warm up
	median := func() time.Duration {
		d := []time.Duration{rt(), rt(), rt(), rt(), rt()}
		slices.Sort(d)
		return d[2]
	}
	idle := median()

	bctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	started := make(chan struct{}, 8)
	for i := range 8 {
		req := chat("m", prompts[i%len(prompts)]+" and more", 3000)
		req.Priority = engine.PriorityBackground
		ch, err := r.Generate(bctx, req)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			first := true
			for ev := range ch {
				if first && len(ev.Tokens) > 0 {
					first = false
					started <- struct{}{}
				}
			}
		})
	}
	for range 4 { // the four slots are decoding
		<-started
	}
	loaded := median()
	bound := 3*idle + 500*time.Millisecond
	st := r.Stats()
	t.Logf("realtime TTFT (median of 5): idle %v, under background load %v (bound %v); preemptions %d, running %d, waiting %d",
		idle, loaded, bound, st.Preemptions, st.Running, st.Waiting)
	if loaded > bound {
		t.Errorf("realtime TTFT under load %v > bound %v (idle %v)", loaded, bound, idle)
	}
	if st.Preemptions == 0 {
		t.Errorf("the realtime requests preempted nothing")
	}
}

// TestOverloadedRetryAfter: past MaxQueued in flight, Generate answers a
// typed ErrOverloaded with a retry hint; every admitted request finishes.
func TestOverloadedRetryAfter(t *testing.T) {
	r := newDemoRunner(t, Config{MaxQueued: 3, MaxRunning: 1})
	ctx := context.Background()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
		refused  int
		done     int
	)
	for i := range 12 {
		ch, err := r.Generate(ctx, noEOS(t, r, chat("demo", prompts[i%len(prompts)], 200)))
		if err != nil {
			var oe *engine.OverloadedError
			if !errors.As(err, &oe) || !errors.Is(err, engine.ErrOverloaded) || oe.RetryAfter < time.Second {
				t.Fatalf("refusal %d: %v (%#v)", i, err, oe)
			}
			refused++
			continue
		}
		admitted++
		wg.Go(func() {
			_, final, _ := collect(t, ch)
			if final.FinishReason == engine.FinishLength {
				mu.Lock()
				done++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 3 || refused != 9 || done != admitted {
		t.Errorf("admitted %d, refused %d, finished %d; want 3, 9, 3", admitted, refused, done)
	}
}

// TestStarvationBound: a background request waiting behind a stream of
// realtime requests (one slot, eight realtime clients, so realtime work
// is always waiting, even when a busy machine delays some clients between
// their requests) starves without the bound and is admitted once it
// waited MaxWaitSteps with it.
func TestStarvationBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxSteps int
		admitted bool // within the wait below
	}{
		{"no bound", -1, false},
		{"bound of 30 steps", 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The prefix cache off: cached prompts would shorten the
			// realtime requests and open gaps in the saturation.
			r := newDemoRunner(t, Config{MaxRunning: 1, MaxWaitSteps: tc.maxSteps, MaxWait: -1, CacheHotBytes: -1})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for range 8 {
				wg.Go(func() {
					for ctx.Err() == nil {
						req := noEOS(t, r, chat("demo", prompts[0], 10))
						req.Priority = engine.PriorityRealtime
						generate(ctx, r, req)
					}
				})
			}
			waitFor(t, func() bool { return r.Stats().Waiting >= 4 })
			bg := chat("demo", prompts[2], 3)
			bg.Priority = engine.PriorityBackground
			done := make(chan run, 1)
			go func() { done <- generate(ctx, r, bg) }()
			wait := 2 * time.Second
			if tc.admitted {
				wait = 30 * time.Second
			}
			select {
			case got := <-done:
				if !tc.admitted {
					t.Fatalf("admitted without a starvation bound (%v): the test traffic does not saturate", got.ttft)
				}
				if got.err != nil {
					t.Fatal(got.err)
				}
				t.Logf("background admitted behind realtime traffic after %v (%d steps of the model)", got.ttft, r.Stats().Steps)
			case <-time.After(wait):
				if tc.admitted {
					t.Fatalf("the background request starved for %v (%+v)", wait, r.Stats())
				}
				t.Logf("without a bound the background request still waits after %v", wait)
			}
		})
	}
}

// TestKVLimit: a prompt whose KV cache cannot fit is refused up front; a
// sequence alone that outgrows the limit ends for length.
func TestKVLimit(t *testing.T) {
	r := newDemoRunner(t, Config{})
	lm, release, err := r.acquire(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	release()
	block := lm.sched.kvFor(1) // one block of positions
	r.cfg.MaxKVBytes = block
	long := chat("demo", strings.Repeat("word ", 300), 8)
	if _, err := r.Generate(context.Background(), long); err == nil {
		t.Errorf("a prompt over the KV limit was admitted")
	}
	got := generate(context.Background(), r, chat("demo", "Hello", 1000))
	if got.err != nil || got.final.FinishReason != engine.FinishLength || len(got.ids) >= 1000 {
		t.Fatalf("lone sequence over the KV limit: %d tokens, finish %q, %v", len(got.ids), got.final.FinishReason, got.err)
	}
	t.Logf("KV limit %d bytes: stopped after %d tokens", block, len(got.ids))
	if st := r.Stats(); st.KVBytes != 0 || st.Running != 0 {
		t.Errorf("after: %+v", st)
	}
}

// TestKVPressurePreempts: two sequences that outgrow the KV limit
// together: the later one is preempted, resumes when memory frees, and
// both still produce their greedy tokens exactly.
func TestKVPressurePreempts(t *testing.T) {
	r := newDemoRunner(t, Config{})
	ctx := context.Background()
	const n = 300 // prompt + 300 > one 256-position block
	want := make([]run, 2)
	for i := range want {
		if want[i] = generate(ctx, r, noEOS(t, r, chat("demo", prompts[i], n))); want[i].err != nil || len(want[i].ids) != n {
			t.Fatalf("alone: %d tokens, %v", len(want[i].ids), want[i].err)
		}
	}
	lm, release, err := r.acquire(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	release()
	r.cfg.MaxKVBytes = 3 * lm.sched.kvFor(1) // three blocks: not four
	// Both queued before either is read, so they are admitted together
	// and outgrow their first block together (started from goroutines, a
	// busy machine could delay one past the other's end).
	got := make([]run, 2)
	chs := make([]<-chan engine.Event, 2)
	start := time.Now()
	for i := range chs {
		if chs[i], err = r.Generate(ctx, noEOS(t, r, chat("demo", prompts[i], n))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = collectRun(ctx, start, chs[i]) })
	}
	wg.Wait()
	for i := range got {
		if got[i].err != nil || !slices.Equal(got[i].ids, want[i].ids) {
			t.Errorf("%q under KV pressure: %d tokens, %v; differs from alone", prompts[i], len(got[i].ids), got[i].err)
		}
	}
	if st := r.Stats(); st.Preemptions == 0 || st.KVBytes != 0 {
		t.Errorf("stats: %+v; want a preemption and no KV left", st)
	}
}

// TestCancelWaiting: a waiting request whose client goes away leaves the
// queue at once; the running one is unaffected.
func TestCancelWaiting(t *testing.T) {
	r := newDemoRunner(t, Config{MaxRunning: 1})
	ctx := context.Background()
	ch, err := r.Generate(ctx, chat("demo", "Hello", 200))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	wctx, cancel := context.WithCancel(ctx)
	wch, err := r.Generate(wctx, chat("demo", "Hello", 5))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range wch {
	}
	waitFor(t, func() bool { st := r.Stats(); return st.InFlight == 1 && st.Waiting == 0 && st.Cancelled == 1 })
	if _, final, _ := collect(t, ch); final.Err != nil || final.Usage.CompletionTokens == 0 {
		t.Errorf("running request: %+v", final)
	}
}

// noEOS forbids the end-of-text tokens so a request runs its length.
func noEOS(t *testing.T, r *Runner, req *engine.Request) *engine.Request {
	t.Helper()
	b, err := r.textOf(context.Background(), req.Model)
	if err != nil {
		t.Fatal(err)
	}
	req.Sampling.LogitBias = map[int]float64{}
	for _, id := range b.Tokenizer().EOS() {
		req.Sampling.LogitBias[id] = -100
	}
	return req
}

// TestCancelDuringPrefill: cancelling the only request of a long prompt
// step stops the forward pass at the next layer: the slot is free sooner
// than the prefill would have taken, and nothing leaks.
func TestCancelDuringPrefill(t *testing.T) {
	opts := demo.Options{Arch: "qwen3", Layers: 8, Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 768, Seed: 3}
	// The prefix cache off: the second long prompt must be computed again.
	r := newRunnerWith(t, Config{StepTokens: 8192, CacheHotBytes: -1}, map[string]demo.Options{"m": opts})
	ctx := context.Background()
	long := func() *engine.Request { return chat("m", strings.Repeat("many words ", 250), 1) }
	generate(ctx, r, chat("m", "warm up", 1))
	full := generate(ctx, r, long())
	if full.err != nil {
		t.Fatal(full.err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch, err := r.Generate(cctx, long())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.Stats().Running == 1 })
	time.Sleep(full.ttft / 10) // inside the prefill step
	cancelled := time.Now()
	cancel()
	for range ch {
	}
	waitFor(t, func() bool { st := r.Stats(); return st.InFlight == 0 && st.Running == 0 })
	freed := time.Since(cancelled)
	t.Logf("prefill of %d tokens takes %v; cancelled during it, the slot was free after %v", full.final.Usage.PromptTokens, full.ttft, freed)
	if freed >= full.ttft {
		t.Errorf("cancelling freed the slot after %v, no sooner than the whole prefill (%v)", freed, full.ttft)
	}
	if st := r.Stats(); st.KVBytes != 0 || st.Cancelled != 1 {
		t.Errorf("after: %+v", st)
	}
	if got := generate(ctx, r, chat("m", "again", 2)); got.err != nil || len(got.ids) != 2 {
		t.Errorf("after the cancel: %v", got.err)
	}
}

// TestSlotsSharedAcrossModels: MaxRunning counts every model of the node;
// a request for another model waits for a slot and runs as soon as one
// frees.
func TestSlotsSharedAcrossModels(t *testing.T) {
	r := newDemoRunner(t, Config{MaxRunning: 1})
	ctx := context.Background()
	actx, cancel := context.WithCancel(ctx)
	ach, err := r.Generate(actx, chat("demo", "Hello", 4000))
	if err != nil {
		t.Fatal(err)
	}
	<-ach
	done := make(chan run, 1)
	go func() { done <- generate(ctx, r, chat("demo-gguf", "Hello", 3)) }()
	waitFor(t, func() bool { st := r.Stats(); return st.Waiting == 1 && st.Running == 1 })
	select {
	case got := <-done:
		t.Fatalf("the other model ran while the only slot was taken: %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	for range ach {
	}
	select {
	case got := <-done:
		if got.err != nil || len(got.ids) != 3 {
			t.Fatalf("after the slot freed: %d tokens, %v", len(got.ids), got.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting model was not woken when the slot freed")
	}
}
