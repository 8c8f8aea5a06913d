package model

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
)

// A sequence's recurrent state: prefill in chunks gives the logits of one
// prefill (the state carries across calls); a failed step leaves it as it
// was; Truncate(0) starts it over; a rewind to an earlier position other
// than 0 makes the sequence refuse to run (ErrNoRewind); the state's size
// is what RecurrentBytes says.
func TestRecurrentState(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m := load(t, be, smallModel(t, "qwen3_next", demo.Options{}), Range{})
	prompt := tokens(7, 90)
	want := forward(t, m, []Input{{Seq: newSeq(t, m), Tokens: prompt, AllLogits: true}}, Range{}, nil).Logits[0]
	vocab := m.Config.VocabSize

	seq := newSeq(t, m)
	// A step cancelled before it runs changes nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Forward(ctx, []Input{{Seq: seq, Tokens: prompt[:5]}}, Range{}, nil); err == nil {
		t.Fatal("a cancelled step succeeded")
	}
	if seq.Len() != 0 {
		t.Fatalf("after a failed step the sequence holds %d positions", seq.Len())
	}
	for _, chunk := range [][2]int{{0, 1}, {1, 40}, {40, 41}, {41, 90}} {
		got := forward(t, m, []Input{{Seq: seq, Tokens: prompt[chunk[0]:chunk[1]], AllLogits: true}}, Range{}, nil).Logits[0]
		sameBits(t, "chunked prefill", got, want[chunk[0]*vocab:chunk[1]*vocab])
	}
	if seq.Len() != 90 {
		t.Fatalf("Len = %d, want 90", seq.Len())
	}
	seq.Truncate(90) // no change
	seq.Truncate(50)
	if _, err := m.Forward(context.Background(), []Input{{Seq: seq, Tokens: prompt[50:51]}}, Range{}, nil); !errors.Is(err, ErrNoRewind) {
		t.Fatalf("a step after Truncate(50): %v, want ErrNoRewind", err)
	}
	seq.Truncate(0)
	got := forward(t, m, []Input{{Seq: seq, Tokens: prompt, AllLogits: true}}, Range{}, nil).Logits[0]
	sameBits(t, "after Truncate(0)", got, want)

	d := m.Config.DeltaNet
	perLayer := int64(d.ValueHeads*d.ValueDim*d.KeyDim+(d.ConvKernel-1)*d.ConvDim()) * 4
	if got, want := m.RecurrentBytes(), 3*perLayer; !m.Recurrent() || got != want {
		t.Errorf("RecurrentBytes = %d, want %d (3 DeltaNet layers of 4)", got, want)
	}
	if first := load(t, be, smallModel(t, "qwen3_next", demo.Options{}), Range{3, 4}); first.Recurrent() {
		t.Error("layer 3 alone (full attention) reported as recurrent")
	}
}

// TestRecurrentSnapshot restores a prefix of a qwen3_next and a
// qwen3_5_moe sequence from exported blocks, as the prefix cache does: a
// block exported when the state is at its end carries a snapshot of it
// and ends a restore, after which the rest's logits are the very bits of
// a sequence that computed everything; a block exported later carries
// none (its KV restores, the state stays behind and Forward refuses until
// Truncate goes back to it); a block whose snapshot has the wrong size is
// refused and changes nothing.
func TestRecurrentSnapshot(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, arch := range []string{"qwen3_next", "qwen3_5_moe"} {
		t.Run(arch, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m")
			demotest.Create(t, dir, demo.Options{Arch: arch, Layers: 4, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16,
				Intermediate: 128, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, Seed: 5})
			m := load(t, be, dir, Range{})
			prompt := tokens(3, 150)
			want := forward(t, m, []Input{{Seq: newSeq(t, m), Tokens: prompt}}, Range{}, nil).Logits[0]

			src := newSeq(t, m)
			var blocks [][]byte
			for a := 0; a < 128; a += 64 {
				forward(t, m, []Input{{Seq: src, Tokens: prompt[a : a+64]}}, Range{}, nil)
				b, err := src.ExportKV(a, a+64)
				if err != nil {
					t.Fatal(err)
				}
				blocks = append(blocks, b)
			}
			snap := int(m.RecurrentBytes())
			if kv := 64 * int(m.KVBytesPerToken()); len(blocks[0]) != kv+snap+snapTrailer {
				t.Fatalf("a block with a snapshot is %d bytes, want %d KV + %d state + %d", len(blocks[0]), kv, snap, snapTrailer)
			}
			late, err := src.ExportKV(0, 64) // the state is at 128 now
			if err != nil || len(late) != len(blocks[0])-snap {
				t.Fatalf("a block exported behind the state: %d bytes, %v; want no snapshot", len(late), err)
			}

			dst := newSeq(t, m)
			bad := slices.Clone(blocks[0])
			bad[len(bad)-snapTrailer]++ // a snapshot length one off
			if err := dst.ImportKV(bad); err == nil || dst.Len() != 0 {
				t.Fatalf("a bad block: %v, sequence holds %d", err, dst.Len())
			}
			for _, b := range blocks {
				if err := dst.ImportKV(b); err != nil {
					t.Fatal(err)
				}
			}
			if dst.StateLen() != 128 {
				t.Fatalf("StateLen = %d after two snapshots, want 128", dst.StateLen())
			}
			got := forward(t, m, []Input{{Seq: dst, Tokens: prompt[128:]}}, Range{}, nil).Logits[0]
			sameBits(t, "after a restore", got, want)

			part := newSeq(t, m)
			for _, b := range [][]byte{blocks[0], late} { // 0..64 with its state, then KV 64..128 without: wrong tokens' KV on purpose
				if err := part.ImportKV(b); err != nil {
					t.Fatal(err)
				}
			}
			if part.StateLen() != 64 {
				t.Fatalf("StateLen = %d, want 64 (the second block has no snapshot)", part.StateLen())
			}
			if _, err := m.Forward(context.Background(), []Input{{Seq: part, Tokens: prompt[128:]}}, Range{}, nil); err == nil {
				t.Fatal("Forward ran a sequence whose state is behind its KV")
			}
			part.Truncate(64)
			forward(t, m, []Input{{Seq: part, Tokens: prompt[64:128]}}, Range{}, nil)
			got = forward(t, m, []Input{{Seq: part, Tokens: prompt[128:]}}, Range{}, nil).Logits[0]
			sameBits(t, "after a restore truncated to its snapshot", got, want)
		})
	}
}
