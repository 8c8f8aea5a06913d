package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func seed(v int64) *int64 { return &v }

// params returns DefaultParams changed by f.
func params(f func(*Params)) Params {
	p := DefaultParams()
	if f != nil {
		f(&p)
	}
	return p
}

func newSampler(t testing.TB, p Params, vocab int) *Sampler {
	t.Helper()
	s, err := New(p, vocab)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustSample(t testing.TB, s *Sampler, in Input) Result {
	t.Helper()
	r, err := s.Sample(in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// logitsOf returns the logits whose softmax is probs.
func logitsOf(probs ...float64) []float32 {
	l := make([]float32, len(probs))
	for i, p := range probs {
		l[i] = float32(math.Log(p))
	}
	return l
}

// randomLogits returns n normally distributed logits with a fixed seed.
func randomLogits(n int, std float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * std)
	}
	return l
}

// refProbs is a straightforward float64 reference of the sampling
// distribution: temperature, top-k, softmax, top-p, min-p, renormalise.
// It sorts the whole row.
func refProbs(logits []float32, p Params) []float64 {
	type tok struct {
		id int
		l  float64
	}
	var toks []tok
	for i, v := range logits {
		if !math.IsInf(float64(v), -1) {
			toks = append(toks, tok{i, float64(v) / p.Temperature})
		}
	}
	slices.SortStableFunc(toks, func(a, b tok) int {
		switch {
		case a.l > b.l:
			return -1
		case a.l < b.l:
			return 1
		}
		return 0
	})
	if p.TopK > 0 && p.TopK < len(toks) {
		toks = toks[:p.TopK]
	}
	z := 0.0
	for _, t := range toks {
		z += math.Exp(t.l - toks[0].l)
	}
	probs := make([]float64, len(toks))
	for i, t := range toks {
		probs[i] = math.Exp(t.l-toks[0].l) / z
	}
	n := len(toks)
	if p.TopP < 1 {
		cum := 0.0
		for i, q := range probs {
			cum += q
			if cum >= p.TopP {
				n = i + 1
				break
			}
		}
	}
	for i := range n {
		if probs[i] < p.MinP*probs[0] {
			n = i
			break
		}
	}
	out := make([]float64, len(logits))
	kept := 0.0
	for i := range n {
		kept += probs[i]
	}
	for i := range n {
		out[toks[i].id] = probs[i] / kept
	}
	return out
}

// keptIDs returns the ids a sampler would draw from, sorted.
func keptIDs(s *Sampler, logits []float32) []int {
	var ids []int
	c, _ := s.truncate(logits)
	for _, c := range c {
		ids = append(ids, int(c.id))
	}
	slices.Sort(ids)
	return ids
}

// support returns the ids with a non-zero probability, sorted.
func support(probs []float64) []int {
	var ids []int
	for i, p := range probs {
		if p > 0 {
			ids = append(ids, i)
		}
	}
	return ids
}
