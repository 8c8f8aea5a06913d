package runner

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/prefixcache"
	"fusion/engine/sample"
)

// tokensRequest is a greedy completion of a prompt given as token ids.
func tokensRequest(prompt []int, maxTokens int) *engine.Request {
	p := sample.DefaultParams()
	p.Temperature = 0
	p.StopTokenIDs = nil
	return &engine.Request{Model: "demo", PromptTokens: prompt, Sampling: p, MaxTokens: maxTokens}
}

// generateIDs runs req and returns the generated ids and the usage.
func generateIDs(t *testing.T, r *Runner, req *engine.Request) ([]int, engine.Usage) {
	t.Helper()
	ch, err := r.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for ev := range ch {
		for _, tl := range ev.Tokens {
			ids = append(ids, tl.ID)
		}
		if ev.Done {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			return ids, ev.Usage
		}
	}
	t.Fatal("no final event")
	return nil, engine.Usage{}
}

func demoPrompt(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 10 + (i*37+i*i)%500
	}
	return p
}

// TestPrefixReuse: which tokens a request restores and stores, prompt
// blocks and output blocks, with the answer unchanged; and a runner with
// the cache off reports no reuse.
func TestPrefixReuse(t *testing.T) {
	r := newDemoRunner(t, Config{CacheSSDBytes: -1})
	prompt := demoPrompt(200) // 3 whole blocks and 8 tokens

	first, u := generateIDs(t, r, tokensRequest(prompt, 100))
	if u.CachedTokens != 0 || u.CacheWriteTokens != 192 {
		t.Fatalf("first run: usage %+v, want 0 cached and 192 written", u)
	}
	if len(first) < 60 {
		t.Skipf("the demo model stopped after %d tokens; the output-block case needs 60", len(first))
	}
	again, u := generateIDs(t, r, tokensRequest(prompt, 100))
	if !slices.Equal(again, first) || u.CachedTokens != 192 || u.CacheWriteTokens != 0 {
		t.Fatalf("second run: usage %+v, same output %v", u, slices.Equal(again, first))
	}
	// The next turn: the prompt grows by the answer. Its blocks, stored at
	// the end of the first run, are reused too.
	next := append(slices.Clone(prompt), first[:60]...) // 260 tokens: 4 whole blocks
	_, u = generateIDs(t, r, tokensRequest(next, 4))
	if u.CachedTokens != 256 {
		t.Errorf("next turn: usage %+v, want 256 cached (the output's block included)", u)
	}
	// A prompt of exactly whole blocks, all cached, leaves its last token
	// to compute, and answers as a cold run does.
	ids, u := generateIDs(t, r, tokensRequest(next[:256], 8))
	if u.CachedTokens != 255 {
		t.Errorf("a 256-token prompt: usage %+v, want 255 cached", u)
	}
	cold := newDemoRunner(t, Config{CacheHotBytes: -1, CacheSSDBytes: -1})
	if want, _ := generateIDs(t, cold, tokensRequest(next[:256], 8)); !slices.Equal(ids, want) {
		t.Errorf("a 256-token prompt from the cache: %v, computed %v", ids, want)
	}
	// A different first token shares nothing.
	other := append([]int{11}, prompt[1:]...)
	if _, u = generateIDs(t, r, tokensRequest(other, 4)); u.CachedTokens != 0 {
		t.Errorf("a prompt differing in its first token: usage %+v", u)
	}

	off := newDemoRunner(t, Config{CacheHotBytes: -1, CacheSSDBytes: -1})
	for range 2 {
		ids, u := generateIDs(t, off, tokensRequest(prompt, 100))
		if !slices.Equal(ids, first) || u.CachedTokens != 0 || u.CacheWriteTokens != 0 {
			t.Errorf("cache off: usage %+v, same output %v", u, slices.Equal(ids, first))
		}
	}
	if s := off.CacheStats(); s.Stored != 0 || s.HotBlocks != 0 {
		t.Errorf("cache off: stats %+v", s)
	}
}

// TestPrefixBadBlockIsRecomputed: a cached block of the wrong size (a
// file with a good checksum is still not trusted) is not used: the
// request recomputes from it, answers the same and replaces it.
func TestPrefixBadBlockIsRecomputed(t *testing.T) {
	r := newDemoRunner(t, Config{CacheSSDBytes: -1})
	prompt := demoPrompt(200)
	want, _ := generateIDs(t, r, tokensRequest(prompt, 20))
	e, err := r.entry("demo")
	if err != nil {
		t.Fatal(err)
	}
	model := e.loaded.cacheKey
	keys := prefixcache.Chain(model, prompt, 64)
	good0, tier := r.pcache.Get(keys[0])
	if tier != prefixcache.Hot {
		t.Fatalf("block 0 after a run: %v", tier)
	}
	perPos := len(good0) / 64
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"two positions", make([]byte, 2*perPos)},
		{"not whole positions", make([]byte, 7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.pcache.ClearHot()
			r.pcache.Put(model, keys[0], 64, good0)
			r.pcache.Put(model, keys[1], 64, tc.data)
			got, u := generateIDs(t, r, tokensRequest(prompt, 20))
			if !slices.Equal(got, want) || u.CachedTokens != 64 {
				t.Errorf("usage %+v, same output %v; want 64 cached (block 0 only)", u, slices.Equal(got, want))
			}
			got, u = generateIDs(t, r, tokensRequest(prompt, 20))
			if !slices.Equal(got, want) || u.CachedTokens != 192 {
				t.Errorf("after the repair: usage %+v, same output %v; want 192 cached", u, slices.Equal(got, want))
			}
		})
	}
}

// TestPrefixReuseMinistral3: Ministral 3 scales its queries by their
// position (a step every 16 positions in the demo), so a request whose
// first 192 positions come from the prefix cache must scale the rest at
// their own positions: its tokens and logprobs are the very ones of a
// runner without the cache.
func TestPrefixReuseMinistral3(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "demo"), demo.Options{Arch: "ministral3", Seed: 8}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{ModelsDir: dir, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	cold, err := New(Config{ModelsDir: dir, CacheHotBytes: -1, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cold.Close() })
	req := tokensRequest(demoPrompt(200), 12)
	req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
	want, _ := generateAll(t, cold, req)
	if _, u := generateAll(t, r, req); u.CacheWriteTokens != 192 {
		t.Fatalf("first run: usage %+v, want 192 written", u)
	}
	got, u := generateAll(t, r, req)
	if u.CachedTokens != 192 {
		t.Fatalf("second run: usage %+v, want 192 cached", u)
	}
	if got != want {
		t.Errorf("from the cache:\n%s\nwithout it:\n%s", got, want)
	}
}
