package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/model"
)

// recurrentDemo writes a tiny demo of a family with Gated DeltaNet layers
// (a recurrent state per sequence) under dir/demo.
func recurrentDemo(t *testing.T, dir, arch string) {
	t.Helper()
	if _, err := demo.Create(filepath.Join(dir, "demo"), demo.Options{Arch: arch, Layers: 4, Hidden: 64, Heads: 4,
		KVHeads: 2, HeadDim: 16, Intermediate: 128, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 10}); err != nil {
		t.Fatal(err)
	}
}

// generateAll runs req and returns its tokens with their logprobs and
// top alternatives, rendered, and the usage.
func generateAll(t *testing.T, r *Runner, req *engine.Request) (string, engine.Usage) {
	t.Helper()
	ch, err := r.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for ev := range ch {
		out += fmt.Sprint(ev.Tokens, ev.TopLogprobs)
		if ev.Done {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			return out, ev.Usage
		}
	}
	t.Fatal("no final event")
	return "", engine.Usage{}
}

// TestRecurrentPrefixCache serves qwen3_next and qwen3_5_moe demos (Gated
// DeltaNet layers) with the prefix cache: blocks carry snapshots of the
// recurrent state where the prefill passed their end (every block, or
// every second one with CacheStateEvery 2, on qwen3_5_moe), a later request restores the
// run of cached blocks up to the deepest snapshot, from RAM or from the
// SSD, and prefills only the rest, and every answer — greedy, and seeded
// with logprobs — has the very tokens and logprobs of a runner without
// the cache.
func TestRecurrentPrefixCache(t *testing.T) {
	seed := int64(7)
	seeded := func(prompt []int) *engine.Request {
		req := tokensRequest(prompt, 12)
		req.Sampling.Temperature, req.Sampling.Seed = 0.9, &seed
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
		return req
	}
	for arch, everies := range map[string][]int{"qwen3_next": {1}, "qwen3_5_moe": {1, 2}} {
		dir := t.TempDir()
		recurrentDemo(t, dir, arch)
		cold, err := New(Config{ModelsDir: dir, CacheHotBytes: -1, CacheSSDBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cold.Close() })
		want := map[string]string{}
		answer := func(r *Runner, name string, req *engine.Request) (string, engine.Usage) {
			got, u := generateAll(t, r, req)
			if _, ok := want[name]; !ok {
				want[name], _ = generateAll(t, cold, req)
			}
			if got != want[name] {
				t.Errorf("%s %s: the answer differs from the one without the cache:\n%s\n%s", arch, name, got, want[name])
			}
			return got, u
		}
		for _, every := range everies {
			t.Run(fmt.Sprintf("%s/every%d", arch, every), func(t *testing.T) {
				r, err := New(Config{ModelsDir: dir, CacheDir: t.TempDir(), CacheStateEvery: every})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				steps := []struct {
					name           string
					req            *engine.Request
					cached, stored int
				}{
					// 150 tokens: blocks 0 and 1 stored, block 1 with a snapshot.
					{"greedy 150", tokensRequest(demoPrompt(150), 12), 0, 128},
					{"greedy 150 again", tokensRequest(demoPrompt(150), 12), 128, 0},
					{"seeded 150", seeded(demoPrompt(150)), 128, 0},
					// 300 tokens share its first two blocks: blocks 2 and 3 are new.
					{"greedy 300", tokensRequest(demoPrompt(300), 12), 128, 128},
					{"seeded 300", seeded(demoPrompt(300)), 256, 0},
					// Block 0 carries a snapshot only when every block does.
					{"greedy 100", tokensRequest(demoPrompt(100), 12), map[int]int{1: 64, 2: 0}[every], 0},
					// A whole-block prompt stops a block short: its last token is computed.
					{"greedy 256", tokensRequest(demoPrompt(256), 12), map[int]int{1: 192, 2: 128}[every], 0},
				}
				for _, s := range steps {
					_, u := answer(r, s.name, s.req)
					if u.CachedTokens != s.cached || u.CacheWriteTokens != s.stored {
						t.Errorf("%s: cached %d, written %d; want %d, %d", s.name, u.CachedTokens, u.CacheWriteTokens, s.cached, s.stored)
					}
				}
				// From the SSD tier: the RAM tier emptied, the snapshots come
				// back from the block files.
				r.FlushCache()
				r.ClearHotCache(context.Background())
				if _, u := answer(r, "seeded 300", seeded(demoPrompt(300))); u.CachedTokens != 256 {
					t.Errorf("from the SSD: cached %d, want 256", u.CachedTokens)
				}
				if st := r.CacheStats(); st.DiskHits < 4 {
					t.Errorf("stats %+v: want the 4 blocks from the SSD", st)
				}
			})
		}
	}
}

// TestQwen3NextRunner: three requests of a qwen3_next demo batched in the
// same steps, through the prefix cache's chunk cuts, answer as each does
// alone.
func TestQwen3NextRunner(t *testing.T) {
	dir := t.TempDir()
	recurrentDemo(t, dir, "qwen3_next")
	r, err := New(Config{ModelsDir: dir, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	prompts := [][]int{demoPrompt(40)[3:], demoPrompt(90)[7:], demoPrompt(170)[1:]}
	alone := make([][]int, len(prompts))
	for i, p := range prompts {
		alone[i], _ = generateIDs(t, r, tokensRequest(p, 12))
	}
	r.ClearHotCache(context.Background())
	together := make([][]int, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			together[i], _ = generateIDs(t, r, tokensRequest(p, 12))
		}()
	}
	wg.Wait()
	for i := range prompts {
		if !slices.Equal(together[i], alone[i]) {
			t.Errorf("prompt %d: batched %v, alone %v", i, together[i], alone[i])
		}
	}
}

// TestRecurrentKVBudget: the KV budget counts a sequence's recurrent
// state (fixed, whatever its length) with its KV blocks. A budget of two
// sequences' KV blocks without their states runs two qwen3_next requests
// one after the other, within it, with the answers each gives alone; one
// byte short of one sequence's KV and state refuses the request. The
// planner's ModelNeed counts the state, and KV for attention layers only.
func TestRecurrentKVBudget(t *testing.T) {
	dir := t.TempDir()
	recurrentDemo(t, dir, "qwen3_next")
	r, err := New(Config{ModelsDir: dir, CacheHotBytes: -1, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ctx := context.Background()
	prompts := [][]int{demoPrompt(40), demoPrompt(50)[5:]}
	alone := make([][]int, len(prompts))
	for i, p := range prompts {
		alone[i], _ = generateIDs(t, r, tokensRequest(p, 8))
	}
	lm, release, err := r.acquire(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	release()
	state := lm.model.(*cpuModel).m.RecurrentBytes()
	block, perTok := lm.model.KVBlock()
	kv := int64(block) * perTok
	if state == 0 || lm.sched.kvFor(1) != kv+state {
		t.Errorf("kvFor(1) = %d, want a KV block %d + the recurrent state %d", lm.sched.kvFor(1), kv, state)
	}

	r.cfg.MaxKVBytes = 2*kv + state // both KV blocks, one state
	stop := r.WatchKV()
	chs := make([]<-chan engine.Event, len(prompts))
	for i, p := range prompts {
		if chs[i], err = r.Generate(ctx, tokensRequest(p, 8)); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range chs {
		var ids []int
		for ev := range ch {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			for _, tl := range ev.Tokens {
				ids = append(ids, tl.ID)
			}
		}
		if !slices.Equal(ids, alone[i]) {
			t.Errorf("prompt %d under the budget: %v, alone %v", i, ids, alone[i])
		}
	}
	if peak := stop(); peak > r.cfg.MaxKVBytes || peak < kv+state {
		t.Errorf("KV high-water mark %d, budget %d (one sequence: %d)", peak, r.cfg.MaxKVBytes, kv+state)
	}

	r.cfg.MaxKVBytes = kv + state - 1
	if _, err := r.Generate(ctx, tokensRequest(prompts[0], 8)); err == nil {
		t.Error("a request was admitted with its state over the budget")
	}

	// The planner counts the KV of the one attention layer of four at the
	// context, and the state of the three DeltaNet layers.
	c := lm.model.(*cpuModel).m.Config
	want := estimateBytes(filepath.Join(dir, "demo")) + int64(c.MaxPositionEmbeddings)*perTok + state
	if need := r.ModelNeed("demo"); need != want {
		t.Errorf("ModelNeed %d, want %d", need, want)
	}
}

// TestPipelineRecurrent: a qwen3_5_moe demo run as a two-stage pipeline
// (this runner's first stage, the later layers on another runner's
// StageModel, as a node's pipeline has them without the network) answers
// with the tokens and logprobs of the whole model, greedy and seeded,
// four requests batched, whatever the split: DeltaNet layers alone on
// the first stage ([0, 1), [0, 3)), or both kinds on each ([0, 2)). The
// downstream here keeps no prefix cache (it is not a Prefixer), so a
// repeat restores nothing (cluster/pipeline's TestPrefixCacheRecurrentStages
// covers the pipeline's prefix cache of such a model).
func TestPipelineRecurrent(t *testing.T) {
	dir := t.TempDir()
	recurrentDemo(t, dir, "qwen3_5_moe")
	whole, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	first, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	seed := int64(5)
	reqs := map[string]func(p []int) *engine.Request{
		"greedy": func(p []int) *engine.Request { return tokensRequest(p, 10) },
		"seeded": func(p []int) *engine.Request {
			req := tokensRequest(p, 10)
			req.Sampling.Temperature, req.Sampling.Seed = 1.2, &seed
			req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
			return req
		},
	}
	prompts := [][]int{demoPrompt(20), demoPrompt(70)[3:], demoPrompt(140)[9:], demoPrompt(33)[1:]}
	want := map[string][]string{}
	for name, mk := range reqs {
		for _, p := range prompts {
			a, _ := generateAll(t, whole, mk(p))
			want[name] = append(want[name], a)
		}
	}
	for gen, split := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("split at %d", split), func(t *testing.T) {
			sm, err := whole.LoadStage(context.Background(), "demo", model.Range{Start: split, End: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer sm.Close()
			down := &localDown{sm: sm, seqs: map[uint64]*model.Sequence{}}
			if err := first.SetPipeline(context.Background(), "demo", &Pipeline{Layers: model.Range{Start: 0, End: split}, Generation: uint64(gen + 1), Down: down}); err != nil {
				t.Fatal(err)
			}
			for name, mk := range reqs {
				got := make([]string, len(prompts))
				usage := make([]engine.Usage, len(prompts))
				var wg sync.WaitGroup
				for i, p := range prompts {
					wg.Go(func() { got[i], usage[i] = generateAll(t, first, mk(p)) })
				}
				wg.Wait()
				for i := range prompts {
					if got[i] != want[name][i] {
						t.Errorf("%s prompt %d as a pipeline:\n%s\nwhole:\n%s", name, i, got[i], want[name][i])
					}
					if usage[i].CachedTokens != 0 || usage[i].CacheWriteTokens != 0 {
						t.Errorf("%s prompt %d: usage %+v, want no prefix cache", name, i, usage[i])
					}
				}
			}
			if n := down.held(); n != 0 {
				t.Errorf("%d sequences still held downstream", n)
			}
		})
	}
}

// TestRecurrentCancel: a qwen3_5_moe request cancelled mid-decode while
// another runs in the same batch steps leaves the other's tokens and
// logprobs as it gives them alone, and frees its recurrent state: no
// sequence left live, the pool's KV accounting back to zero.
func TestRecurrentCancel(t *testing.T) {
	dir := t.TempDir()
	recurrentDemo(t, dir, "qwen3_5_moe")
	r, err := New(Config{ModelsDir: dir, CacheHotBytes: -1, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	other := func() *engine.Request {
		req := tokensRequest(demoPrompt(60)[3:], 10)
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
		return req
	}
	want, _ := generateAll(t, r, other())
	before := r.Stats()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long, err := r.Generate(ctx, tokensRequest(demoPrompt(40), 2000))
	if err != nil {
		t.Fatal(err)
	}
	decoded := 0
	for decoded < 3 { // the long request is decoding
		ev, ok := <-long
		if !ok || ev.Done {
			t.Fatalf("the long request ended early: %+v", ev)
		}
		decoded += len(ev.Tokens)
	}
	ch, err := r.Generate(context.Background(), other())
	if err != nil {
		t.Fatal(err)
	}
	var got string
	cancelled := false
	for ev := range ch {
		got += fmt.Sprint(ev.Tokens, ev.TopLogprobs)
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		if !cancelled && len(ev.Tokens) > 0 {
			// Both decode in the same steps now: cancel the long one.
			cancel()
			cancelled = true
		}
	}
	for ev := range long { // closed without an answer's end
		decoded += len(ev.Tokens)
		if ev.Done && ev.Err == nil {
			t.Errorf("the cancelled request finished (%s, %d tokens)", ev.FinishReason, decoded)
		}
	}
	if got != want {
		t.Errorf("beside a cancelled request:\n%s\nalone:\n%s", got, want)
	}
	lm, release, err := r.acquire(context.Background(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	release()
	cm := lm.model.(*cpuModel)
	// The scheduler frees a cancelled sequence at its next step.
	for range 200 {
		cm.mu.Lock()
		live := len(cm.live)
		cm.mu.Unlock()
		if live == 0 && r.kvBytes.Load() == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := r.Stats()
	cm.mu.Lock()
	live := len(cm.live)
	cm.mu.Unlock()
	if live != 0 || st.KVBytes != 0 || r.kvBytes.Load() != 0 || st.Running != 0 || st.InFlight != 0 {
		t.Errorf("after the cancel: %d sequences live, KV %d (counted %d), running %d, in flight %d; want none",
			live, st.KVBytes, r.kvBytes.Load(), st.Running, st.InFlight)
	}
	if st.Cancelled != before.Cancelled+1 || st.SharedSteps == before.SharedSteps {
		t.Errorf("cancelled %d → %d, shared steps %d → %d: want one cancel, after steps shared by both",
			before.Cancelled, st.Cancelled, before.SharedSteps, st.SharedSteps)
	}
}
