package model

import (
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// DeepSeek-V3's cache holds one head of its latent (64 features here)
// and rotated key features (32) per position and layer, counted exactly
// by KVBytesPerToken and the cache's Bytes, and a prefix exported and
// imported in 64-position blocks (as the prefix cache does) continues to
// bit-identical logits.
func TestDeepseekKVCache(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m := load(t, be, smallModel(t, "deepseek_v3", demo.Options{}), Range{})
	if got, want := m.KVBytesPerToken(), int64(4*1*(64+32)*2*4); got != want {
		t.Fatalf("KVBytesPerToken %d, want %d (4 layers of one latent head)", got, want)
	}
	toks := tokens(5, 300)
	full := newSeq(t, m)
	want := slices.Clone(forward(t, m, []Input{{Seq: full, Tokens: toks}}, Range{}, nil).Logits[0])
	if _, used := full.CacheBytes(); used != 300*m.KVBytesPerToken() {
		t.Errorf("300 positions use %d bytes of cache, want %d", used, 300*m.KVBytesPerToken())
	}
	src, dst := newSeq(t, m), newSeq(t, m)
	forward(t, m, []Input{{Seq: src, Tokens: toks[:192]}}, Range{}, nil)
	for a := 0; a < 192; a += 64 {
		blk, err := src.ExportKV(a, a+64)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.ImportKV(blk); err != nil {
			t.Fatal(err)
		}
	}
	got := forward(t, m, []Input{{Seq: dst, Tokens: toks[192:]}}, Range{}, nil).Logits[0]
	sameBits(t, "logits after a restored prefix", got, want)
}

// A bf16 deepseek_v3 checkpoint with kv_b_proj (the older layout) gives
// bit-identical logits to the same weights as embed_q and unembed_out:
// the split on load only moves values.
func TestDeepseekKVBProj(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	dir := smallModel(t, "deepseek_v3", demo.Options{})
	old := filepath.Join(t.TempDir(), "kvb")
	if err := copyDir(dir, old); err != nil {
		t.Fatal(err)
	}
	if err := toKVBProj(old); err != nil {
		t.Fatal(err)
	}
	toks := tokens(3, 40)
	var logits [][]float32
	for _, path := range []string{dir, old} {
		m := load(t, be, path, Range{})
		logits = append(logits, slices.Clone(forward(t, m, []Input{{Seq: newSeq(t, m), Tokens: toks}}, Range{}, nil).Logits[0]))
	}
	sameBits(t, "logits from kv_b_proj", logits[1], logits[0])
}
