package runner

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"fusion/engine/demo"
)

// TestDeepseekServed serves a deepseek_v3 demo (latent attention: one
// cache head of latent and rotated key features) through the runner:
// its prompt blocks are stored in the prefix cache and a second run
// restores them and answers the same; three requests run together
// (batched in the same steps) answer as each does alone; and the KV
// memory the scheduler plans with is what the caches hold.
func TestDeepseekServed(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "demo"), demo.Options{Arch: "deepseek_v3", Layers: 3, Hidden: 128, Heads: 4,
		HeadDim: 64, Intermediate: 256, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{ModelsDir: dir, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	prompt := demoPrompt(200) // 3 whole blocks and 8 tokens
	first, u := generateIDs(t, r, tokensRequest(prompt, 24))
	if u.CachedTokens != 0 || u.CacheWriteTokens != 192 {
		t.Fatalf("first run: usage %+v, want 0 cached and 192 written", u)
	}
	again, u := generateIDs(t, r, tokensRequest(prompt, 24))
	if !slices.Equal(again, first) || u.CachedTokens != 192 {
		t.Fatalf("second run: usage %+v, %v, want 192 cached and %v", u, again, first)
	}
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(first)))); distinct < 8 {
		t.Errorf("the answer %v walks through %d tokens", first, distinct)
	}

	prompts := [][]int{demoPrompt(40)[3:], demoPrompt(90)[7:], demoPrompt(150)[1:]}
	alone := make([][]int, len(prompts))
	for i, p := range prompts {
		alone[i], _ = generateIDs(t, r, tokensRequest(p, 16))
	}
	together := make([][]int, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			together[i], _ = generateIDs(t, r, tokensRequest(p, 16))
		}()
	}
	wg.Wait()
	for i := range prompts {
		if !slices.Equal(together[i], alone[i]) {
			t.Errorf("prompt %d: batched %v, alone %v", i, together[i], alone[i])
		}
	}

	// The planner counts one latent head of 64 + 32 features (keys and
	// values, float32, three layers) per position of the context, not 4
	// heads of num_key_value_heads.
	want := estimateBytes(filepath.Join(dir, "demo")) + int64(3*2*96*4)*163840
	if need := r.ModelNeed("demo"); need != want {
		t.Errorf("ModelNeed %d, want %d", need, want)
	}
}
