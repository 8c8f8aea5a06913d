package model

import (
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
)

// gemma4Model writes a small gemma4_text with every part its config can
// switch on: sliding (window 20) and full layers (heads of 32 and 64:
// global_head_dim), KV shared by the last two of four layers, k = v on
// the full ones, per-layer inputs, and the
// mixture beside the MLP; it returns its path.
func gemma4Model(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	demotest.Create(t, dir, demo.Options{Arch: "gemma4_text", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, Intermediate: 128,
		SlidingWindow: 20, SlidingPattern: 2, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 3})
	return dir
}

// TestGemma4BatchingMatchesAlone: batched rows of gemma4_text (shared
// KV, per-layer inputs, experts) are bit-identical to each sequence run
// alone.
func TestGemma4BatchingMatchesAlone(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	checkBatchingMatchesAlone(t, load(t, be, gemma4Model(t), Range{}))
}

// TestGemma4LayerRanges: per-layer inputs need the embedding, and a KV-shared
// layer its source layer, in the same range: other ranges are refused at
// load, the rest run.
func TestGemma4LayerRanges(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	path := gemma4Model(t)
	for _, r := range []Range{{1, 4}, {2, 4}} {
		if m, err := Load(t.Context(), path, be, Options{Layers: r}); err == nil {
			m.Close()
			t.Errorf("layers %v loaded", r)
		}
	}
	m := load(t, be, path, Range{0, 2})
	seq := newSeq(t, m)
	if out := forward(t, m, []Input{{Seq: seq, Tokens: tokens(1, 30)}}, Range{}, nil); out.Hidden == nil || seq.Len() != 30 {
		t.Errorf("layers [0, 2): hidden %v, %d positions", out.Hidden != nil, seq.Len())
	}
}

// TestGemma4KVExport: the KV-shared layers have no cache of their own
// (KVBytesPerToken counts the first two of four layers), and a prefix's KV
// exported and imported gives the same logits after it.
func TestGemma4KVExport(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := load(t, be, gemma4Model(t), Range{})
	// Layer 0 is sliding (head_dim 32), layer 1 full (global_head_dim 64).
	if got, want := m.KVBytesPerToken(), int64(2*(32+64)*2*4); got != want {
		t.Errorf("KVBytesPerToken %d, want %d (two layers of own KV, 32 and 64 wide)", got, want)
	}
	checkKVExportImport(t, m, 200, 128)
}
