package model

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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

// TestGemma4LayerRanges: a gemma4_text of six layers (per-layer inputs,
// global_head_dim, experts; layers 3–5 share the KV of layers 1 and 2)
// run as layers [0, k) then [k, 6), the hidden state handed over with
// the later layers' per-layer inputs, gives bit-identical logits to one
// call: on one model for every k, and on two stage models for k = 1 (the
// one cut that keeps the KV-shared layers with their sources). A second
// stage that would separate them is refused at load.
func TestGemma4LayerRanges(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	path := filepath.Join(t.TempDir(), "m")
	demotest.Create(t, path, demo.Options{Arch: "gemma4_text", Layers: 6, Hidden: 64, Heads: 2, KVHeads: 1, Intermediate: 64,
		SlidingWindow: 20, SlidingPattern: 2, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 16, Seed: 5})
	full := load(t, be, path, Range{})
	const L = 6
	steps := [][]int{tokens(1, 37), {5}, {77}, tokens(2, 9)}
	ref := newSeq(t, full)
	var want [][]float32
	for _, toks := range steps {
		want = append(want, forward(t, full, []Input{{Seq: ref, Tokens: toks, AllLogits: true}}, Range{}, nil).Logits[0])
	}
	for k := 1; k < L; k++ {
		if got, want := full.HiddenCols(k), 64+(L-k)*16; got != want {
			t.Errorf("HiddenCols(%d) = %d, want %d", k, got, want)
		}
		seq := newSeq(t, full)
		var s1, s2 *Sequence
		var first, second *Model
		if k == 1 {
			first, second = load(t, be, path, Range{0, k}), load(t, be, path, Range{k, L})
			s1, s2 = newSeq(t, first), newSeq(t, second)
		} else if m, err := Load(t.Context(), path, be, Options{Layers: Range{k, L}}); err == nil {
			m.Close()
			t.Errorf("layers [%d, %d) loaded apart from the KV their shared layers read", k, L)
		} else if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "KV") {
			t.Errorf("layers [%d, %d): %v", k, L, err)
		}
		for i, toks := range steps {
			h := forward(t, full, []Input{{Seq: seq, Tokens: toks}}, Range{0, k}, nil).Hidden
			if h.Cols != full.HiddenCols(k) {
				t.Fatalf("k=%d: hidden of %d columns, want %d", k, h.Cols, full.HiddenCols(k))
			}
			got := forward(t, full, []Input{{Seq: seq, Len: len(toks), AllLogits: true}}, Range{k, L}, h).Logits[0]
			sameBits(t, fmt.Sprintf("k=%d step %d, one model", k, i), got, want[i])
			if first != nil {
				h = forward(t, first, []Input{{Seq: s1, Tokens: toks}}, Range{}, nil).Hidden
				got = forward(t, second, []Input{{Seq: s2, Len: len(toks), AllLogits: true}}, Range{}, h).Logits[0]
				sameBits(t, fmt.Sprintf("k=%d step %d, two stages", k, i), got, want[i])
			}
		}
	}
	// A hidden state without the per-layer inputs is refused.
	seq := newSeq(t, full)
	h := forward(t, full, []Input{{Seq: seq, Tokens: tokens(3, 4)}}, Range{0, 2}, nil).Hidden
	h = &Hidden{Rows: h.Rows, Cols: 64, Data: h.Data[:h.Rows*64]}
	if _, err := full.Forward(t.Context(), []Input{{Seq: seq, Len: 4}}, Range{2, L}, h); !errors.Is(err, ErrBadInput) {
		t.Errorf("a hidden state of hidden_size columns: %v, want ErrBadInput", err)
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
