package model

import (
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
)

// gemma4Demo is a small gemma4_text with every part its config can switch
// on: sliding (window 20) and full layers, KV shared by the last two of
// four layers, k = v on the full ones, per-layer inputs, and the mixture
// beside the MLP.
func gemma4Demo(o demo.Options) demo.Options {
	o.SlidingWindow, o.SlidingPattern = 20, 2
	o.Experts, o.ExpertsPerTok, o.MoEIntermediate = 8, 2, 64
	return o
}

// TestGemma4BatchingMatchesAlone: batched rows of gemma4_text (shared
// KV, per-layer inputs, experts) are bit-identical to each sequence run
// alone, in bf16 and MLX 4-bit.
func TestGemma4BatchingMatchesAlone(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for name, o := range map[string]demo.Options{
		"bf16":   gemma4Demo(demo.Options{}),
		"mlx-q4": gemma4Demo(demo.Options{Quantize: 4, GroupSize: 64}),
	} {
		t.Run(name, func(t *testing.T) {
			checkBatchingMatchesAlone(t, load(t, be, smallModel(t, "gemma4_text", o), Range{}))
		})
	}
}

// TestGemma4LayerRanges: per-layer inputs need the embedding, and a KV-shared
// layer its source layer, in the same range: other ranges are refused at
// load, the rest run.
func TestGemma4LayerRanges(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	path := smallModel(t, "gemma4_text", gemma4Demo(demo.Options{}))
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
