package pipeline

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/model"
	"fusion/engine/prefixcache"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// TestPrefixCacheRecurrentStages: a qwen3_5_moe demo (Gated DeltaNet
// layers 0–2 and 4–6, attention layers 3 and 7) in two stages, [0, 4) on
// a runner and [4, 8) behind a Pipeline server, each with a prefix cache.
// The first run of a prompt saves every stage's blocks, with a snapshot of
// the stage's DeltaNet state at every second block (CacheStateEvery 2);
// the same prompt again restores on both stages up to the deepest
// snapshot before its last token and answers with the very tokens and
// logprobs of the whole model on one runner, greedy and seeded. A prompt
// sharing three blocks restores two (the last snapshot it shares). Each
// stage's cache counts the snapshots of its own layers in its bytes. When
// the stages hold snapshots to different depths they keep the shallower,
// the deeper one importing its blocks again to have its state there.
func TestPrefixCacheRecurrentStages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := demo.Create(dir, demo.Options{Arch: "qwen3_5_moe", Layers: 8, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16,
		Intermediate: 128, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 21}); err != nil {
		t.Fatal(err)
	}
	models, name := filepath.Dir(dir), filepath.Base(dir)
	last := load(t, dir, model.Range{Start: 4, End: 8})
	lastCache, err := prefixcache.Open(prefixcache.Config{HotBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer lastCache.Close()
	lastSrv, lastAddr, dial := serve(t, func(string) (Stage, bool) {
		return Stage{Generation: 1, Model: last, Cache: lastCache, CacheKey: prefixcache.ModelKey("last")}, true
	})
	cfg := runner.Config{ModelsDir: models, Threads: 1, Backend: runner.BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1}
	whole, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	cfg.CacheHotBytes, cfg.CacheStateEvery = 64<<20, 2
	first, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.SetPipeline(context.Background(), name, &runner.Pipeline{Layers: model.Range{Start: 0, End: 4}, Generation: 1,
		Down: NewClient(name, 1, lastAddr, dial)}); err != nil {
		t.Fatal(err)
	}
	const promptLen, decode, bs = 300, 5, 64
	prompt := func(seed int) []int {
		toks := make([]int, promptLen)
		for i := range toks {
			toks[i] = (seed*131 + i*7 + 3) % 600
		}
		return toks
	}
	run := func(r *runner.Runner, toks []int, seeded bool) (string, engine.Usage) {
		t.Helper()
		p := sample.DefaultParams()
		p.Temperature, p.Logprobs, p.TopLogprobs = 0, true, 2
		if seeded {
			seed := int64(5)
			p.Temperature, p.Seed = 1.2, &seed
		}
		return generate(t, context.Background(), r, &engine.Request{Model: name, PromptTokens: toks, Sampling: p, MaxTokens: decode})
	}
	// Rows each stage computes and restores over a run.
	type counts struct{ first, last, lastRestored int64 }
	now := func() counts {
		c := lastSrv.Counts()
		return counts{first.Stats().StepRows, c.Rows, c.Restored}
	}
	check := func(t *testing.T, what string, toks []int, seeded bool, wantCached int) {
		t.Helper()
		want, _ := run(whole, toks, seeded)
		before := now()
		got, u := run(first, toks, seeded)
		after := now()
		rows := counts{after.first - before.first, after.last - before.last, after.lastRestored - before.lastRestored}
		rest := int64(len(toks) + decode - 1 - wantCached)
		if got != want {
			t.Errorf("%s, as a pipeline:\n%s\nwhole:\n%s", what, got, want)
		}
		if u.CachedTokens != wantCached || rows.first != rest || rows.last != rest || rows.lastRestored != int64(wantCached) {
			t.Errorf("%s: cached %d, rows %+v; want %d cached and %d rows on each stage", what, u.CachedTokens, rows, wantCached, rest)
		}
	}
	// The deepest snapshot before the last token: every 2 blocks.
	hit := (promptLen - 1) / (2 * bs) * (2 * bs)
	for i, tc := range []struct {
		name   string
		seeded bool
	}{{"greedy", false}, {"seeded", true}} {
		t.Run(tc.name, func(t *testing.T) {
			toks := prompt(i)
			check(t, "cold", toks, tc.seeded, 0)
			check(t, "warm", toks, tc.seeded, hit)
		})
	}
	// Three blocks shared with the greedy prompt, the third without a
	// snapshot: the restore stops at the second.
	partial := append(prompt(0)[:3*bs+8], prompt(7)[:promptLen-3*bs-8]...)
	check(t, "a shared prefix of three blocks", partial, false, 2*bs)

	// The two prompts stored their 4 whole blocks each, a snapshot in
	// every second (not the output's blocks: the state is past them); the
	// partial one its blocks 2 and 3, only the latter new (with a
	// snapshot). Each stage's cache holds its layers' KV and its DeltaNet
	// layers' state in those blocks.
	const blocks, snapshots = 4 + 4 + 1, 2 + 2 + 1
	firstModel := load(t, dir, model.Range{Start: 0, End: 4})
	for _, st := range []struct {
		name  string
		cache prefixcache.Stats
		m     *model.Model
	}{{"first", first.CacheStats(), firstModel}, {"last", lastCache.Stats(), last}} {
		block := bs*st.m.KVBytesPerToken() + 8 // the state trailer
		want := blocks*block + snapshots*st.m.RecurrentBytes()
		t.Logf("%s stage: %d blocks, %d bytes; a block's KV %d bytes, a snapshot %d bytes", st.name, st.cache.HotBlocks, st.cache.HotBytes, block, st.m.RecurrentBytes())
		if st.cache.HotBlocks != blocks || st.cache.HotBytes != want {
			t.Errorf("%s stage's cache: %d blocks, %d bytes; want %d blocks, %d bytes (%d snapshots of %d bytes)",
				st.name, st.cache.HotBlocks, st.cache.HotBytes, blocks, want, snapshots, st.m.RecurrentBytes())
		}
	}

	// The three prompts at once, restored between the others' steps: the
	// same answers.
	var wg sync.WaitGroup
	for i, toks := range [][]int{prompt(0), prompt(1), partial} {
		wg.Go(func() {
			want, _ := run(whole, toks, i == 1)
			got, u := run(first, toks, i == 1)
			if got != want || u.CachedTokens == 0 {
				t.Errorf("prompt %d among others: cached %d, as a pipeline:\n%s\nwhole:\n%s", i, u.CachedTokens, got, want)
			}
		})
	}
	wg.Wait()

	// The last stage loses its blocks, then gets back the greedy prompt's
	// first three from a shorter prompt (a snapshot at the second only):
	// the greedy prompt again restores its fourth block's snapshot on the
	// first stage, but the stages agree on the second's, which the first
	// stage imports again to have its state there.
	lastCache.ClearHot()
	check(t, "after the last stage's cache was cleared", prompt(0)[:200], false, 0)
	check(t, "the stages holding snapshots to different depths", prompt(0), false, 2*bs)
}
