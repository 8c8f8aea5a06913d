package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/demo"
)

func states(r *Runner) map[string]ModelStatus {
	out := map[string]ModelStatus{}
	for _, s := range r.List() {
		out[s.ID] = s
	}
	return out
}

// TestPoolEviction: with a budget for two models, loading a third evicts
// the least recently used idle unpinned one, never a pinned one; a model
// too big for what pinned and busy models leave is refused.
func TestPoolEviction(t *testing.T) {
	models := map[string]demo.Options{}
	for _, name := range []string{"a", "b", "c"} {
		models[name] = demo.Options{Arch: "qwen3", Seed: 1}
	}
	r := newRunnerWith(t, Config{}, models)
	size := estimateBytes(r.models["a"].info.Path)
	if size <= 0 {
		t.Fatalf("estimated size %d", size)
	}
	r.cfg.MemoryBudget = 2*size + size/2
	ctx := context.Background()

	for _, m := range []string{"a", "b"} {
		if err := r.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Pin("a"); err != nil {
		t.Fatal(err)
	}
	// a is pinned and older than b: b goes.
	if err := r.Load(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	st := states(r)
	if st["a"].State != StateIdle || !st["a"].Pinned || st["b"].State != StateUnloaded || st["c"].State != StateIdle {
		t.Fatalf("after loading c: %+v", st)
	}
	// Loaded, a model counts its exact weights (the files less headers).
	if w := r.Stats().WeightBytes; st["a"].Bytes <= size*9/10 || st["a"].Bytes > size || st["a"].Bytes+st["c"].Bytes != w {
		t.Errorf("bytes: a %d, c %d, weights %d; files %d each", st["a"].Bytes, st["c"].Bytes, w, size)
	}
	// b comes back on demand, evicting c (a stays pinned).
	if got := generate(ctx, r, chat("b", "Hello", 3)); got.err != nil {
		t.Fatal(got.err)
	}
	st = states(r)
	if st["a"].State != StateIdle || st["b"].State != StateIdle || st["c"].State != StateUnloaded || st["b"].LastUsed.IsZero() {
		t.Fatalf("after using b: %+v", st)
	}
	// A model busy with a request is not evicted: with a pinned and b
	// busy, c does not fit.
	bctx, cancel := context.WithCancel(ctx)
	ch, err := r.Generate(bctx, chat("b", "Hello", 4000))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	if states(r)["b"].State != StateReady {
		t.Errorf("b with a request in flight: %+v", states(r)["b"])
	}
	if err := r.Load(ctx, "c"); !errors.Is(err, ErrOverBudget) || !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("load c with a pinned and b busy: %v", err)
	}
	if err := r.Unload(ctx, "b"); !errors.Is(err, ErrBusy) {
		t.Errorf("unload busy b: %v", err)
	}
	cancel()
	for range ch {
	}
	waitFor(t, func() bool { return states(r)["b"].State == StateIdle })
	if err := r.Unpin("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Load(ctx, "c"); err != nil { // a is now the LRU idle one
		t.Fatal(err)
	}
	if st := states(r); st["a"].State != StateUnloaded || st["b"].State != StateIdle || st["c"].State != StateIdle {
		t.Fatalf("after unpinning a and loading c: %+v", st)
	}
	if err := r.Unload(ctx, "c"); err != nil || states(r)["c"].State != StateUnloaded {
		t.Fatalf("unload c: %v %+v", err, states(r)["c"])
	}
	if st := r.Stats(); st.Evictions != 3 || st.WeightBytes != states(r)["b"].Bytes {
		t.Errorf("stats: %+v; want 3 evictions and one model's weights", st)
	}
}

// TestPoolIdleTTL: an unpinned model unused for IdleTTL is unloaded; a
// pinned one stays; an unloaded model loads again on demand.
func TestPoolIdleTTL(t *testing.T) {
	models := map[string]demo.Options{"a": {Arch: "qwen3", Seed: 1}, "b": {Arch: "qwen3", Seed: 2}}
	r := newRunnerWith(t, Config{IdleTTL: 200 * time.Millisecond, Models: map[string]ModelSettings{"b": {Pinned: true}}}, models)
	ctx := context.Background()
	for _, m := range []string{"a", "b"} {
		if got := generate(ctx, r, chat(m, "Hello", 2)); got.err != nil {
			t.Fatal(got.err)
		}
	}
	waitFor(t, func() bool { return states(r)["a"].State == StateUnloaded })
	time.Sleep(300 * time.Millisecond)
	if st := states(r); st["b"].State != StateIdle || !st["b"].Pinned {
		t.Errorf("pinned b after the TTL: %+v", st["b"])
	}
	if got := generate(ctx, r, chat("a", "Hello", 2)); got.err != nil || len(got.ids) != 2 {
		t.Fatalf("a after idle unload: %v", got.err)
	}
}

// TestModelSettings: a context cap, default sampling and a parser
// override from the per-model settings.
func TestModelSettings(t *testing.T) {
	greedy := 0.0
	r := newRunnerWith(t, Config{Models: map[string]ModelSettings{
		"a": {ContextLength: 40, Sampling: SamplingDefaults{Temperature: &greedy}, Parser: "hermes"},
	}}, map[string]demo.Options{"a": {Arch: "qwen3", Seed: 1}})
	ctx := context.Background()
	req := chat("a", "Hello", 0)
	req.Sampling.Temperature = 1 // the default: the model's setting applies
	one := generate(ctx, r, req)
	two := generate(ctx, r, req)
	if one.err != nil || two.err != nil || one.text != two.text || one.final.FinishReason != engine.FinishContextWindow {
		t.Fatalf("with the model's greedy default: %q %v / %q %v", one.text, one.err, two.text, two.err)
	}
	if n := one.final.Usage.PromptTokens + one.final.Usage.CompletionTokens; n != 40 {
		t.Errorf("prompt+completion %d, want the context cap of 40", n)
	}
	lm, release, err := r.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if lm.parser != "hermes" {
		t.Errorf("parser %q, want the override", lm.parser)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestContextWindowBound: without a node cap, a generation may take what
// the context window leaves after its prompt, and one cut by the window
// ends with FinishContextWindow, not FinishLength; a configured cap stays
// a cap and the default under it.
func TestContextWindowBound(t *testing.T) {
	const window = 40
	models := map[string]demo.Options{"a": {Arch: "qwen3", Seed: 1}}
	settings := map[string]ModelSettings{"a": {ContextLength: window}}
	uncapped := newRunnerWith(t, Config{Models: settings}, models)
	capped := newRunnerWith(t, Config{Models: settings, MaxTokens: 10}, models)
	ctx := context.Background()
	prompt := generate(ctx, uncapped, chat("a", "Hello", 1)).final.Usage.PromptTokens
	room := window - prompt
	tests := []struct {
		name      string
		r         *Runner
		maxTokens int
		tokens    int
		finish    engine.FinishReason
		err       string
	}{
		{"no max_tokens: the window", uncapped, 0, room, engine.FinishContextWindow, ""},
		{"max_tokens over the window", uncapped, 32000, room, engine.FinishContextWindow, ""},
		{"max_tokens inside the window", uncapped, 5, 5, engine.FinishLength, ""},
		{"max_tokens exactly the room", uncapped, room, room, engine.FinishLength, ""},
		{"configured cap is the default", capped, 0, 10, engine.FinishLength, ""},
		{"configured cap refuses more", capped, 32000, 0, "", "over this server's limit of 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := generate(ctx, tt.r, chat("a", "Hello", tt.maxTokens))
			if tt.err != "" {
				if got.err == nil || !strings.Contains(got.err.Error(), tt.err) {
					t.Fatalf("err %v, want one mentioning %q", got.err, tt.err)
				}
				return
			}
			if got.err != nil || got.final.FinishReason != tt.finish || got.final.Usage.CompletionTokens != tt.tokens {
				t.Fatalf("finish %q after %d tokens (%v), want %q after %d (prompt %d, window %d)",
					got.final.FinishReason, got.final.Usage.CompletionTokens, got.err, tt.finish, tt.tokens, prompt, window)
			}
		})
	}
}
