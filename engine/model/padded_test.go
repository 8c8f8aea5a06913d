package model

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/modelfile"
)

// TestPaddedStates: the real rows of a right-padded sequence have the
// hidden states an unpadded forward gives them, and a padding row's
// states do not depend on how much padding follows (each sees the real
// positions only); inputs the model cannot pad are ErrBadInput. Its
// parity with transformers' padding mask is engine/flux2's
// TestTextEncoderMatchesPipeline.
func TestPaddedStates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qwen3")
	if _, err := demo.Create(dir, demo.Options{Arch: modelfile.ArchQwen3, Layers: 3, Hidden: 32, Heads: 4, KVHeads: 2, HeadDim: 8, Intermediate: 48, DType: "f32", Seed: 5}); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	ctx := context.Background()
	m, err := Load(ctx, dir, be, Options{Layers: Range{0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	real := []int{11, 12, 13, 14, 15}
	const pad = 3
	padded := func(n int) []int {
		out := append([]int(nil), real...)
		for len(out) < n {
			out = append(out, pad)
		}
		return out
	}
	after := []int{0, 1, 2}
	short, err := m.PaddedStates(ctx, padded(8), len(real), after)
	if err != nil {
		t.Fatal(err)
	}
	long, err := m.PaddedStates(ctx, padded(12), len(real), after)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Config.HiddenSize
	for i, a := range after {
		for j := range 8 * h {
			if short[i][j] != long[i][j] {
				t.Fatalf("after %d layers, row %d: %v with 8 tokens, %v with 12", a, j/h, short[i][j], long[i][j])
			}
		}
		if a == 0 {
			continue
		}
		seq, err := m.NewSequence(len(real))
		if err != nil {
			t.Fatal(err)
		}
		out, err := m.Forward(ctx, []Input{{Seq: seq, Tokens: real}}, Range{0, a}, nil)
		seq.Close()
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for j, v := range out.Hidden.Data {
			worst = max(worst, math.Abs(float64(v-short[i][j])))
		}
		if worst > 1e-6 {
			t.Errorf("after %d layers: the real rows differ from an unpadded forward by %.3g", a, worst)
		}
	}
	for name, c := range map[string]struct {
		tokens []int
		real   int
		after  []int
	}{
		"no real tokens":     {padded(8), 0, after},
		"more real than all": {real[:4], 5, after},
		"layer not loaded":   {padded(8), 5, []int{3}},
		"bad token":          {append(padded(7), -1), 5, after},
	} {
		if _, err := m.PaddedStates(ctx, c.tokens, c.real, c.after); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: error %v", name, err)
		}
	}
}
