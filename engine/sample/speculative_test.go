package sample

import (
	"testing"
)

// chiSquare compares counts over draws with the distribution want; it
// fails on a drawn token of probability 0.
func chiSquare(t *testing.T, counts []int, want []float64, draws int) {
	t.Helper()
	chi2, df := 0.0, -1
	for id, q := range want {
		if q == 0 {
			if counts[id] != 0 {
				t.Errorf("token %d has probability 0 but was drawn %d times", id, counts[id])
			}
			continue
		}
		e := q * float64(draws)
		chi2 += (float64(counts[id]) - e) * (float64(counts[id]) - e) / e
		df++
	}
	bound := chiSquareBound(df)
	t.Logf("chi-square %.2f, bound %.2f, df %d", chi2, bound, df)
	if chi2 > bound {
		t.Errorf("chi-square %.2f > %.2f (df %d): counts %v", chi2, bound, df, counts)
	}
}

// TestVerifyDistribution: whatever the draft proposes and whatever
// distribution it drew from, the token a verified position takes is
// distributed as the target's p (rejection sampling), with p the
// distribution Sample draws from: temperature, top-k/top-p/min-p, logit
// bias, presence penalty and the mask all applied. 20,000 draws per case,
// fixed seeds, chi-square at the 0.999 quantile.
func TestVerifyDistribution(t *testing.T) {
	const draws = 20000
	target := logitsOf(0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01)
	other := logitsOf(0.05, 0.05, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1)
	vocab := len(target)
	odd := MaskFunc(func(id int) bool { return id%2 == 1 })
	tests := []struct {
		name  string
		set   func(*Params)
		draft func(*Sampler) (int, Dist) // nil Dist: a deterministic draft
		mask  Mask
		out   []int
		// expected: the logits Sample would see after penalties and mask
		want []float32
	}{
		{name: "draft likely", draft: fixed(0), want: target},
		{name: "draft unlikely", draft: fixed(7), want: target},
		{name: "draft masked out", draft: fixed(0), mask: odd, want: maskRow(target, odd)},
		{name: "draft cut by top_k", set: func(p *Params) { p.TopK = 3 }, draft: fixed(6), want: target},
		{name: "top_p temperature", set: func(p *Params) { p.TopP = 0.7; p.Temperature = 0.8 }, draft: fixed(1), want: target},
		{name: "bias and presence", set: func(p *Params) { p.LogitBias = map[int]float64{5: 2}; p.PresencePenalty = 1.5 },
			out: []int{0}, draft: fixed(5), want: biased(target, map[int]float64{5: 2, 0: -1.5})},
		{name: "draft model q", draft: drafter(t, other, vocab), want: target},
		{name: "draft model q min_p", set: func(p *Params) { p.MinP = 0.2 }, draft: drafter(t, other, vocab), want: target},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := params(tt.set)
			p.Seed = seed(int64(4000 + i))
			ref := p
			ref.LogitBias, ref.PresencePenalty = nil, 0
			want := refProbs(tt.want, ref)
			s := newSampler(t, p, vocab)
			counts := make([]int, vocab)
			accepted := 0
			for range draws {
				d, q := tt.draft(s)
				r, ok, err := s.Verify(Input{Logits: target, Output: tt.out, Mask: tt.mask}, d, q)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (r.ID == d) && q == nil {
					t.Fatalf("accepted %v but token %d, draft %d", ok, r.ID, d)
				}
				if ok {
					accepted++
				}
				counts[r.ID]++
			}
			t.Logf("accepted %d of %d", accepted, draws)
			chiSquare(t, counts, want, draws)
		})
	}
}

// TestVerifyGreedy: at temperature 0 the verified token is the argmax
// under the mask, accepted exactly when the draft is it.
func TestVerifyGreedy(t *testing.T) {
	logits := logitsOf(0.1, 0.5, 0.2, 0.2)
	even := MaskFunc(func(id int) bool { return id%2 == 0 })
	for _, tt := range []struct {
		draft, want int
		mask        Mask
		ok          bool
	}{
		{draft: 1, want: 1, ok: true},
		{draft: 2, want: 1},
		{draft: 1, want: 2, mask: even},
		{draft: 2, want: 2, mask: even, ok: true},
	} {
		s := newSampler(t, params(func(p *Params) { p.Temperature = 0 }), len(logits))
		r, ok, err := s.Verify(Input{Logits: logits, Mask: tt.mask}, tt.draft, nil)
		if err != nil || r.ID != tt.want || ok != tt.ok {
			t.Errorf("draft %d mask %v: got %d %v %v, want %d %v", tt.draft, tt.mask != nil, r.ID, ok, err, tt.want, tt.ok)
		}
	}
}

// TestDrawDist: Draw's distribution is the sampler's, and its token is
// drawn from it.
func TestDrawDist(t *testing.T) {
	logits := logitsOf(0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01)
	p := params(func(p *Params) { p.TopK = 5; p.Temperature = 0.9; p.Seed = seed(9) })
	want := refProbs(logits, p)
	s := newSampler(t, p, len(logits))
	r, d, err := s.Draw(Input{Logits: logits})
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got := d.At(id); got < w-1e-6 || got > w+1e-6 {
			t.Errorf("q(%d) = %v, want %v", id, got, w)
		}
	}
	if d.At(r.ID) == 0 {
		t.Errorf("drew %d of probability 0", r.ID)
	}
}

func fixed(id int) func(*Sampler) (int, Dist) {
	return func(*Sampler) (int, Dist) { return id, nil }
}

// drafter draws drafts from its own sampler over logits (another model).
func drafter(t *testing.T, logits []float32, vocab int) func(*Sampler) (int, Dist) {
	ds := newSampler(t, params(func(p *Params) { p.Seed = seed(77) }), vocab)
	return func(*Sampler) (int, Dist) {
		r, q, err := ds.Draw(Input{Logits: logits})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID, q
	}
}

func maskRow(logits []float32, m Mask) []float32 {
	out := make([]float32, len(logits))
	copy(out, logits)
	applyMask(out, m)
	return out
}

func biased(logits []float32, add map[int]float64) []float32 {
	out := make([]float32, len(logits))
	copy(out, logits)
	for id, v := range add {
		out[id] = float32(float64(out[id]) + v)
	}
	return out
}
