package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "fusion/cluster/pipelinepb"
	"fusion/engine/model"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// TestMaskForms: a mask travels in its smallest form (allowed ids, rejected
// ids or the bitset) and comes back bit for bit; hostile masks are
// refused.
func TestMaskForms(t *testing.T) {
	const vocab = 151936
	few, most, half := sample.NewBitset(vocab), sample.NewBitset(vocab), sample.NewBitset(vocab)
	for _, id := range []int{0, 7, 64, 65, 151935} {
		few.Set(id)
	}
	for id := range vocab {
		if id%997 != 3 {
			most.Set(id)
		}
		if id%2 == 0 {
			half.Set(id)
		}
	}
	for _, tc := range []struct {
		name     string
		b        sample.Bitset
		kind     pb.Mask_Kind
		maxBytes int
	}{
		{"few allowed", few, pb.Mask_KIND_ALLOWED, 64},
		{"most allowed", most, pb.Mask_KIND_REJECTED, 2*vocab/997 + 16},
		{"half", half, pb.Mask_KIND_BITS, vocab/8 + 64},
		{"none", sample.NewBitset(vocab), pb.Mask_KIND_ALLOWED, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := encodeMask(tc.b)
			b, err := decodeMask(m)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(b, tc.b) {
				t.Error("the mask changed on the way")
			}
			size := len(mustMarshal(t, m))
			t.Logf("%v in %d bytes (the bitset is %d)", m.Kind, size, vocab/8)
			if m.Kind != tc.kind || size > tc.maxBytes {
				t.Errorf("sent as %v in %d bytes, want %v in at most %d", m.Kind, size, tc.kind, tc.maxBytes)
			}
		})
	}
	for _, m := range []*pb.Mask{
		{Kind: pb.Mask_KIND_BITS, Vocab: 1 << 30},
		{Kind: pb.Mask_KIND_BITS, Vocab: 128, Bits: make([]byte, 8)},
		{Kind: pb.Mask_KIND_ALLOWED, Vocab: 128, Deltas: []uint32{5, 200}},
		{Kind: pb.Mask_KIND_REJECTED, Vocab: 128, Deltas: []uint32{5, 0}},
		{Kind: pb.Mask_KIND_ALLOWED, Vocab: 100},
		{Vocab: 128},
	} {
		if _, err := decodeMask(m); err == nil {
			t.Errorf("decoded %v", m)
		}
	}
}

func mustMarshal(t *testing.T, m *pb.Mask) []byte {
	t.Helper()
	b, err := protoMarshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDrawOnLastStage: sequences sampled on the last of three stages (a
// middle stage relays), with seeded temperature, penalties, logit bias,
// logprobs and a grammar-like mask, draw the tokens, logprobs and
// generator states a sampler fed the whole model's logits draws; only
// the tokens come back, no logits. A sequence without a sampler still
// gets its logits. A draw for a sequence without a sampler, or token ids
// out of the vocabulary, are refused.
func TestDrawOnLastStage(t *testing.T) {
	p := threeStages(t, 5, 1)
	whole, first, c := p.whole, p.first, p.c
	ctx := context.Background()
	vocab := whole.Config.VocabSize

	seed := int64(9)
	params := []sample.Params{
		func() sample.Params {
			p := sample.DefaultParams()
			p.Temperature = 0
			p.Logprobs, p.TopLogprobs = true, 3
			return p
		}(),
		func() sample.Params {
			p := sample.DefaultParams()
			p.Temperature, p.TopP, p.Seed = 2.5, 0.97, &seed
			p.RepetitionPenalty, p.FrequencyPenalty, p.PresencePenalty = 1.4, 0.6, 0.4
			p.LogitBias = map[int]float64{3: 5, 4: -100}
			p.Logprobs, p.TopLogprobs = true, 5
			return p
		}(),
		sample.DefaultParams(), // logits back: no sampler downstream
	}
	mask := sample.NewBitset(vocab)
	for id := range vocab {
		if id%3 != 0 {
			mask.Set(id)
		}
	}
	prompts := [][]int{{1, 2, 3, 4, 5}, {9, 8, 7, 7}, {4, 4}}
	n := len(prompts)
	ws, fs := make([]*model.Sequence, n), make([]*model.Sequence, n)
	local, far := make([]*sample.Sampler, n), make([]*sample.Sampler, n)
	for i := range n {
		var err error
		if ws[i], err = whole.NewSequence(64); err != nil {
			t.Fatal(err)
		}
		if fs[i], err = first.NewSequence(64); err != nil {
			t.Fatal(err)
		}
		if local[i], err = sample.New(params[i], vocab); err != nil {
			t.Fatal(err)
		}
		if far[i], err = sample.New(params[i], vocab); err != nil { // the first stage's, in step with local
			t.Fatal(err)
		}
	}
	history := slices.Clone(prompts)
	tokens := slices.Clone(prompts)
	for step := range 8 {
		var win, fin []model.Input
		var seqs []runner.StageSeq
		for i, toks := range tokens {
			win = append(win, model.Input{Seq: ws[i], Tokens: toks})
			fin = append(fin, model.Input{Seq: fs[i], Tokens: toks})
			s := runner.StageSeq{ID: uint64(i + 1), Len: len(toks)}
			if step == 0 {
				s.MaxLen = 64
			}
			if i < 2 {
				if step == 0 {
					s.Sampler = &runner.StageSampler{Params: params[i], PromptLen: len(prompts[i])}
				}
				s.Tokens = toks
				s.Draw = &runner.StageDraw{RNG: far[i].RNGState()}
				if i == 1 && step%2 == 1 {
					s.Draw.Mask = mask
				}
			}
			seqs = append(seqs, s)
		}
		want, got := stepBoth(t, whole, first, c, win, fin, seqs)
		for i := range n {
			if i == 2 {
				if got[i].Drawn != nil || !slices.Equal(got[i].Logits, want.Logits[i]) {
					t.Fatalf("step %d: the sequence without a sampler did not get its logits", step)
				}
				tokens[i] = []int{step + 1}
				continue
			}
			in := sample.Input{Logits: want.Logits[i], Prompt: prompts[i], Output: history[i][len(prompts[i]):]}
			if seqs[i].Draw.Mask != nil {
				in.Mask = mask
			}
			res, err := local[i].Sample(in)
			if err != nil {
				t.Fatal(err)
			}
			d := got[i].Drawn
			if d == nil || got[i].Logits != nil || d.Err != nil {
				t.Fatalf("step %d sequence %d: %+v, want a drawn token only", step, i, got[i])
			}
			if fmt.Sprint(d.Result) != fmt.Sprint(res) {
				t.Fatalf("step %d sequence %d: drew %+v on the last stage, %+v here", step, i, d.Result, res)
			}
			if !params[i].Greedy() {
				if err := far[i].SetRNGState(d.RNG); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(d.RNG, local[i].RNGState()) {
					t.Fatalf("step %d sequence %d: the generator state came back out of step", step, i)
				}
			}
			if seqs[i].Draw.Mask != nil && !mask.Allowed(d.ID) {
				t.Fatalf("step %d: drew %d against the mask", step, d.ID)
			}
			tokens[i] = []int{d.ID}
			history[i] = append(history[i], d.ID)
		}
	}

	for _, tc := range []struct {
		name string
		seq  runner.StageSeq
		want string
	}{
		{"a draw without a sampler", runner.StageSeq{ID: 1, Len: 1, MaxLen: 8, Draw: &runner.StageDraw{}}, "without a sampler"},
		{"a token out of the vocabulary", runner.StageSeq{ID: 1, Len: 1, MaxLen: 8, Tokens: []int{vocab},
			Sampler: &runner.StageSampler{Params: sample.DefaultParams(), PromptLen: 1}, Draw: &runner.StageDraw{}}, "out of the vocabulary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := NewClient("m", 1, p.lastAddr, p.dial)
			defer bad.Close()
			h := &model.Hidden{Rows: 1, Cols: whole.Config.HiddenSize, Data: make([]float32, whole.Config.HiddenSize)}
			if _, err := bad.Step(ctx, []runner.StageSeq{tc.seq}, h); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
