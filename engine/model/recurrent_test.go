package model

import (
	"context"
	"errors"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// A sequence's recurrent state: prefill in chunks gives the logits of one
// prefill (the state carries across calls); a failed step leaves it as it
// was; Truncate(0) starts it over; a rewind to an earlier position other
// than 0 makes the sequence refuse to run (ErrNoRewind), as does
// exporting its KV alone; the state's size is what RecurrentBytes says.
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
	if _, err := seq.ExportKV(0, 64); !errors.Is(err, ErrNoRewind) {
		t.Errorf("ExportKV: %v, want ErrNoRewind", err)
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
