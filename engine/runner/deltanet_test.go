package runner

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"fusion/engine/demo"
)

// TestQwen3NextRunner serves a qwen3_next demo (Gated DeltaNet layers,
// a recurrent state per sequence) through the runner: the prefix cache
// stores nothing for it and a second run recomputes the same answer;
// three requests batched in the same steps answer as each does alone.
func TestQwen3NextRunner(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "demo"), demo.Options{Arch: "qwen3_next", Layers: 4, Hidden: 64, Heads: 4,
		KVHeads: 2, HeadDim: 16, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 10}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{ModelsDir: dir, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	prompt := demoPrompt(150)
	first, u := generateIDs(t, r, tokensRequest(prompt, 16))
	if u.CachedTokens != 0 || u.CacheWriteTokens != 0 {
		t.Fatalf("first run: usage %+v, want nothing cached or written", u)
	}
	again, u := generateIDs(t, r, tokensRequest(prompt, 16))
	if !slices.Equal(again, first) || u.CachedTokens != 0 {
		t.Fatalf("second run: usage %+v, %v, want 0 cached and %v", u, again, first)
	}

	prompts := [][]int{demoPrompt(40)[3:], demoPrompt(90)[7:], demoPrompt(70)[1:]}
	alone := make([][]int, len(prompts))
	for i, p := range prompts {
		alone[i], _ = generateIDs(t, r, tokensRequest(p, 12))
	}
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
