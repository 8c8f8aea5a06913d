package model

import (
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// TestKVExportImportIsExact restores the KV of a prefix computed by one
// sequence into another and checks the logits of the rest are the very
// bits a sequence that computed everything gets, for prefixes that end
// inside and on the edge of the CPU cache's 256-position blocks.
func TestKVExportImportIsExact(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m := load(t, be, smallModel(t, "qwen3", demo.Options{}), Range{})
	cases := []struct {
		name         string
		total, split int
	}{
		{"one block", 80, 64},
		{"several blocks across a cache block", 300, 192},
		{"prefix on the cache block edge", 300, 256},
		{"exported in two parts", 200, 128},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkKVExportImport(t, m, tc.total, tc.split) })
	}
	// Ministral 3's queries are scaled by their position (a step every 16
	// in the demo): after a restored prefix, as after a prefix-cache hit,
	// the rest must be scaled at its own positions, not from 0.
	t.Run("ministral3 position-scaled queries", func(t *testing.T) {
		checkKVExportImport(t, load(t, be, smallModel(t, "ministral3", demo.Options{}), Range{}), 100, 64)
	})
}

// checkKVExportImport restores the KV of the first split of total tokens
// computed by one sequence into another, in 64-position blocks as the
// prefix cache does, and checks the logits of the rest are the very bits
// a sequence that computed everything gets.
func checkKVExportImport(t *testing.T, m *Model, total, split int) {
	t.Helper()
	toks := tokens(7, total)
	full := newSeq(t, m)
	want := slices.Clone(forward(t, m, []Input{{Seq: full, Tokens: toks}}, Range{}, nil).Logits[0])

	src := newSeq(t, m)
	forward(t, m, []Input{{Seq: src, Tokens: toks[:split]}}, Range{}, nil)
	dst := newSeq(t, m)
	for a := 0; a < split; a += 64 {
		b := min(a+64, split)
		blk, err := src.ExportKV(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(blk) != (b-a)*int(m.KVBytesPerToken()) {
			t.Fatalf("block of %d positions is %d bytes, want %d", b-a, len(blk), (b-a)*int(m.KVBytesPerToken()))
		}
		if err := dst.ImportKV(blk); err != nil {
			t.Fatal(err)
		}
	}
	if dst.Len() != split {
		t.Fatalf("restored sequence holds %d positions, want %d", dst.Len(), split)
	}
	got := forward(t, m, []Input{{Seq: dst, Tokens: toks[split:]}}, Range{}, nil).Logits[0]
	sameBits(t, "logits after a restored prefix", got, want)
}

func TestKVExportImportErrors(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m := load(t, be, smallModel(t, "qwen3", demo.Options{}), Range{})
	s := newSeq(t, m)
	forward(t, m, []Input{{Seq: s, Tokens: tokens(7, 10)}}, Range{}, nil)
	if _, err := s.ExportKV(0, 11); err == nil {
		t.Error("export past the sequence's end: no error")
	}
	if _, err := s.ExportKV(5, 4); err == nil {
		t.Error("export of a reversed range: no error")
	}
	if err := s.ImportKV(make([]byte, 7)); err == nil {
		t.Error("import of a block that is not whole positions: no error")
	}
	blk, err := s.ExportKV(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	small, err := m.NewSequence(12)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := small.ImportKV(blk); err != nil {
		t.Fatal(err)
	}
	if err := small.ImportKV(blk); err == nil {
		t.Error("import past the sequence's max length: no error")
	}
}
