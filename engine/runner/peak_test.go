package runner

import (
	"context"
	"testing"
)

// TestWatchKV: a watch keeps the KV high-water mark of the generations
// that ran while it was open, at least their prompts' positions, after
// their caches were freed; a watch opened before or after them sees none.
func TestWatchKV(t *testing.T) {
	r := newDemoRunner(t, Config{})
	ctx := context.Background()
	if got := r.WatchKV()(); got != 0 {
		t.Fatalf("an idle runner's KV peak %d", got)
	}
	outer, inner := r.WatchKV(), r.WatchKV()
	res := generate(ctx, r, chat("demo", prompts[1], 4))
	if res.err != nil {
		t.Fatal(res.err)
	}
	peak := inner()
	if kv := r.Stats().KVBytes; kv != 0 {
		t.Fatalf("KV bytes %d after the generation ended", kv)
	}
	var perPos int64
	r.mu.Lock()
	for _, e := range r.models {
		if e.loaded != nil {
			_, perPos = e.loaded.model.KVBlock()
		}
	}
	r.mu.Unlock()
	if prompt := int64(res.final.Usage.PromptTokens); perPos <= 0 || peak < prompt*perPos {
		t.Errorf("KV peak %d, want at least %d prompt positions of %d bytes", peak, prompt, perPos)
	}
	if inner() != peak || outer() != peak {
		t.Errorf("watches of the same interval disagree: %d, %d, %d", peak, inner(), outer())
	}
	if got := r.WatchKV()(); got != 0 {
		t.Errorf("a watch opened after the generation: %d", got)
	}
	t.Logf("KV peak %d bytes for %d prompt tokens", peak, res.final.Usage.PromptTokens)
}
