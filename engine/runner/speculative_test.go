package runner

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"fusion/engine/backend/mlx"
	"fusion/engine/demo"
	"fusion/engine/sample"
	"fusion/internal/testenv"
)

// specModels: a target, a smaller draft with the same (built-in)
// tokenizer, and a copy of the target (a draft that agrees with it).
var specModels = map[string]demo.Options{
	"target": {Arch: "qwen3", Layers: 3, Hidden: 96, Heads: 4, KVHeads: 2, Intermediate: 192, Seed: 11},
	"small":  {Arch: "qwen3", Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, Seed: 12},
	"copy":   {Arch: "qwen3", Layers: 3, Hidden: 96, Heads: 4, KVHeads: 2, Intermediate: 192, Seed: 11},
}

// repetitive is a prompt whose continuation prompt lookup can guess.
var repetitive = strings.Repeat("alpha beta gamma delta epsilon, ", 12) + "alpha beta"

// TestSpeculativeGreedyIdentical: greedy answers are token for token the
// same with and without drafting, by prompt lookup, by a smaller draft
// model and by a draft that is a copy of the model (which, the CPU rows
// being batch-independent, is accepted every time); usage and Stats count
// the drafts.
func TestSpeculativeGreedyIdentical(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name, draft string
		prompt      string
		allAccepted bool
	}{
		{name: "prompt lookup", prompt: repetitive},
		{name: "prompt lookup plain", prompt: prompts[1]},
		{name: "small draft", draft: "small", prompt: prompts[3]},
		{name: "copy draft", draft: "copy", prompt: prompts[1], allAccepted: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Models: map[string]ModelSettings{"target": {DraftModel: tt.draft, NumDraftTokens: 5}}}
			r := newRunnerWith(t, cfg, specModels)
			const n = 40
			want := generate(ctx, r, chat("target", tt.prompt, n))
			if want.err != nil || len(want.ids) != n {
				t.Fatalf("plain: %d tokens, %v", len(want.ids), want.err)
			}
			req := chat("target", tt.prompt, n)
			req.Speculative = true
			got := generate(ctx, r, req)
			if got.err != nil || !slices.Equal(got.ids, want.ids) || got.text != want.text {
				t.Fatalf("drafting: %v %q %v\nplain:    %v %q", got.ids, got.text, got.err, want.ids, want.text)
			}
			u := got.final.Usage
			t.Logf("drafted %d, accepted %d, %d tokens", u.DraftedTokens, u.AcceptedTokens, u.CompletionTokens)
			if u.DraftedTokens == 0 || u.CompletionTokens != n || u.AcceptedTokens > u.DraftedTokens {
				t.Errorf("usage %+v", u)
			}
			if tt.allAccepted && u.AcceptedTokens != u.DraftedTokens {
				t.Errorf("a copy of the model as draft: %d of %d accepted", u.AcceptedTokens, u.DraftedTokens)
			}
			if want.final.Usage.DraftedTokens != 0 {
				t.Errorf("a plain request drafted: %+v", want.final.Usage)
			}
			st := r.Stats()
			if st.Drafted != int64(u.DraftedTokens) || st.Accepted != int64(u.AcceptedTokens) {
				t.Errorf("stats %d/%d, usage %d/%d", st.Drafted, st.Accepted, u.DraftedTokens, u.AcceptedTokens)
			}
			if st.KVBytes != 0 || st.Running != 0 {
				t.Errorf("after the run: %+v", st)
			}
		})
	}
}

// TestSpeculativeGreedyIdenticalMLX: the same on the MLX backend, whose
// KV cache is truncated differently (lengths only, arrays kept).
func TestSpeculativeGreedyIdenticalMLX(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	ctx := context.Background()
	for _, draft := range []string{"", "copy"} {
		t.Run("draft="+draft, func(t *testing.T) {
			cfg := Config{Backend: BackendMLX, Models: map[string]ModelSettings{"target": {DraftModel: draft}}}
			r := newRunnerWith(t, cfg, specModels)
			if st := r.BackendStatus(); st.Name != BackendMLX {
				t.Fatalf("runs on %s: %s", st.Name, st.Reason)
			}
			const n = 24
			want := generate(ctx, r, chat("target", repetitive, n))
			req := chat("target", repetitive, n)
			req.Speculative = true
			got := generate(ctx, r, req)
			if want.err != nil || got.err != nil || !slices.Equal(got.ids, want.ids) {
				t.Fatalf("drafting: %v %v\nplain:    %v %v", got.ids, got.err, want.ids, want.err)
			}
			u := got.final.Usage
			t.Logf("drafted %d, accepted %d", u.DraftedTokens, u.AcceptedTokens)
			if u.DraftedTokens == 0 || draft == "copy" && u.AcceptedTokens != u.DraftedTokens {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

// TestSpeculativeBatched: drafting sequences share steps with plain ones
// and with each other, and every answer is the one it gives alone.
func TestSpeculativeBatched(t *testing.T) {
	ctx := context.Background()
	for _, draft := range []string{"", "small"} {
		t.Run("draft="+draft, func(t *testing.T) {
			r := newRunnerWith(t, Config{Models: map[string]ModelSettings{"target": {DraftModel: draft}}}, specModels)
			const n = 24
			ps := append(slices.Clone(prompts), repetitive)
			alone := make([]run, len(ps))
			for i, p := range ps {
				if alone[i] = generate(ctx, r, chat("target", p, n)); alone[i].err != nil {
					t.Fatal(alone[i].err)
				}
			}
			before := r.Stats()
			together := make([]run, len(ps))
			var wg sync.WaitGroup
			for i, p := range ps {
				req := chat("target", p, n)
				req.Speculative = i%2 == 0 || p == repetitive
				wg.Go(func() { together[i] = generate(ctx, r, req) })
			}
			wg.Wait()
			for i := range ps {
				if together[i].err != nil || !slices.Equal(together[i].ids, alone[i].ids) {
					t.Errorf("%q together: %v %v\nalone: %v", ps[i], together[i].ids, together[i].err, alone[i].ids)
				}
			}
			after := r.Stats()
			if after.SharedSteps == before.SharedSteps || after.Drafted == before.Drafted {
				t.Errorf("no shared drafting steps: %+v", after)
			}
			if after.KVBytes != 0 || after.Running != 0 {
				t.Errorf("after the runs: %+v", after)
			}
		})
	}
}

// TestSpeculativeSettings: the model's settings make drafting the
// default; a draft model of another tokenizer or vocabulary is refused
// by CheckDraft and the model does not load with it.
func TestSpeculativeSettings(t *testing.T) {
	ctx := context.Background()
	models := map[string]demo.Options{
		"target": specModels["target"],
		"small":  specModels["small"],
		"qwen":   {Arch: "qwen3", Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, Seed: 1, VocabFrom: testenv.TokenizerDir(t, "qwen3")},
	}
	r := newRunnerWith(t, Config{Models: map[string]ModelSettings{"target": {Speculative: true}}}, models)
	got := generate(ctx, r, chat("target", repetitive, 16))
	if got.err != nil || got.final.Usage.DraftedTokens == 0 {
		t.Fatalf("speculative by default: %+v %v", got.final.Usage, got.err)
	}
	if err := r.CheckDraft(ctx, "target", "small"); err != nil {
		t.Errorf("small: %v", err)
	}
	for _, d := range []string{"qwen", "target"} {
		err := r.CheckDraft(ctx, "target", d)
		t.Logf("%s: %v", d, err)
		if err == nil {
			t.Errorf("%s accepted as a draft", d)
		}
	}
	r.SetModelSettings("target", ModelSettings{DraftModel: "qwen"})
	if err := r.Unload(ctx, "target"); err != nil {
		t.Fatal(err)
	}
	if got := generate(ctx, r, chat("target", "hi", 4)); got.err == nil || !strings.Contains(got.err.Error(), "draft_model") {
		t.Errorf("loading with an unusable draft: %v", got.err)
	}
}

func TestLookup(t *testing.T) {
	for _, tt := range []struct {
		prompt, output []int
		nmin, nmax, k  int
		want           []int
	}{
		{[]int{1, 2, 3, 4, 1, 2}, nil, 1, 3, 3, []int{3, 4, 1}},
		{[]int{1, 2, 3, 4, 1, 2}, []int{3}, 1, 3, 2, []int{4, 1}},
		{[]int{5, 1, 9, 1, 2, 7, 1}, []int{2}, 2, 2, 4, []int{7, 1, 2}}, // the latest match of [1 2]
		{[]int{5, 1, 9, 1, 2, 7, 1}, []int{2}, 3, 3, 4, nil},            // no [7 1 2] before
		{[]int{1, 2, 3}, nil, 1, 3, 4, nil},                             // nothing repeats
		{[]int{4, 4, 4, 4}, nil, 1, 2, 8, []int{4}},                     // the match right before the tail
		{[]int{1, 2, 3, 9, 2, 3}, []int{}, 1, 3, 2, []int{9, 2}},        // longest n first
	} {
		if got := lookup(tt.prompt, tt.output, tt.nmin, tt.nmax, tt.k); !slices.Equal(got, tt.want) {
			t.Errorf("lookup(%v, %v, %d..%d, k %d) = %v, want %v", tt.prompt, tt.output, tt.nmin, tt.nmax, tt.k, got, tt.want)
		}
	}
}

// TestSpeculativeFirstTokenDistribution: at temperature > 0 the first
// generated token of a drafting request (which goes through
// verification: the prompt's last token waits for the first drafting
// step) is distributed exactly as the model's p after the request's
// transforms (temperature, top-p, repetition penalty), over 20,000
// draws with fixed seeds, chi-square at the 0.999 quantile. The drafts
// are drawn from the real draft model's distribution q at that position,
// and verified by the generation's own verify path on the model's real
// logits.
func TestSpeculativeFirstTokenDistribution(t *testing.T) {
	const draws = 20000
	ctx := context.Background()
	r := newRunnerWith(t, Config{Models: map[string]ModelSettings{"target": {DraftModel: "small", NumDraftTokens: 1}}}, specModels)
	lm, release, err := r.acquire(ctx, "target")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	req := chat("target", prompts[2], 4)
	req.Speculative = true
	req.Sampling.Temperature, req.Sampling.TopP, req.Sampling.RepetitionPenalty = 1.3, 0.97, 1.2
	g, err := r.prepare(ctx, lm, req)
	if err != nil {
		t.Fatal(err)
	}
	// The model's logits after the prompt, and the draft's.
	rowAfterPrompt := func(m languageModel) []float32 {
		seq, err := m.NewSequence(len(g.prompt) + 4)
		if err != nil {
			t.Fatal(err)
		}
		defer seq.Release()
		logits, err := m.Forward(ctx, []stepInput{{seq: seq, tokens: g.prompt}})
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(logits[0])
	}
	row := rowAfterPrompt(lm.model)
	drow := rowAfterPrompt(lm.draft.model)
	vocab := lm.model.VocabSize()
	rows := append(slices.Clone(row), row...) // the second row only picks the bonus token

	p := want(t, g, row)
	dsmp := g.spec.dsmp
	counts := make([]int, vocab)
	accepted := 0
	for i := range draws {
		seed := int64(1000 + i)
		req.Sampling.Seed = &seed
		g, err := r.prepare(ctx, lm, req)
		if err != nil {
			t.Fatal(err)
		}
		res, q, err := dsmp.Draw(g.input(drow))
		if err != nil {
			t.Fatal(err)
		}
		g.spec.drafts, g.spec.qs = []int{res.ID}, []sample.Dist{q}
		evs, _, a, err := g.verify(rows, vocab)
		if err != nil || len(evs) == 0 || len(evs[0].Tokens) != 1 {
			t.Fatalf("verify: %v %v", evs, err)
		}
		accepted += a
		counts[evs[0].Tokens[0].ID]++
	}
	t.Logf("draft accepted %d of %d", accepted, draws)
	if accepted == 0 || accepted == draws {
		t.Errorf("accepted %d of %d: the test does not exercise both branches", accepted, draws)
	}
	chiSquareTest(t, counts, p, draws)
}

// want is the distribution g's sampler draws its next token from after
// logits row (every transform applied).
func want(t *testing.T, g *generation, row []float32) []float64 {
	t.Helper()
	s, err := sample.New(g.params, len(row))
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := s.Draw(g.input(row))
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float64, len(row))
	for _, x := range d {
		p[x.ID] = x.P
	}
	return p
}

// chiSquareTest compares counts with draws from p, the ids expected
// fewer than 5 times pooled into one bin; the bound is the 0.999
// quantile (Wilson–Hilferty).
func chiSquareTest(t *testing.T, counts []int, p []float64, draws int) {
	t.Helper()
	chi2, df := 0.0, -1
	var poolE, poolO float64
	for id, q := range p {
		e := q * float64(draws)
		if q == 0 {
			if counts[id] != 0 {
				t.Errorf("token %d has probability 0 but was drawn %d times", id, counts[id])
			}
			continue
		}
		if e < 5 {
			poolE += e
			poolO += float64(counts[id])
			continue
		}
		chi2 += (float64(counts[id]) - e) * (float64(counts[id]) - e) / e
		df++
	}
	if poolE > 0 {
		chi2 += (poolO - poolE) * (poolO - poolE) / poolE
		df++
	}
	const z = 3.090
	k := float64(df)
	bound := k * math.Pow(1-2/(9*k)+z*math.Sqrt(2/(9*k)), 3)
	t.Logf("chi-square %.2f, bound %.2f, df %d", chi2, bound, df)
	if chi2 > bound {
		t.Errorf("chi-square %.2f > %.2f (df %d)", chi2, bound, df)
	}
}
