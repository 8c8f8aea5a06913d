package sample

import (
	"math"
	"slices"
	"testing"
)

// refLogSoftmax is a straightforward float64 log-softmax.
func refLogSoftmax(logits []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v))
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - m - math.Log(sum)
	}
	return out
}

func TestLogprobs(t *testing.T) {
	const vocab = 10000
	logits := randomLogits(vocab, 4, 21)
	logits[17] = 40 // far above the rest: exp would overflow float32
	prompt, output := []int{1, 2, 3, 17}, []int{17, 5, 5}
	bias := map[int]float64{9: 30, 10: -100}
	mask := NewBitset(vocab)
	for id := range vocab {
		if id%5 != 0 {
			mask.Set(id)
		}
	}
	for _, tt := range []struct {
		name string
		set  func(*Params)
		mask Mask
	}{
		{"plain", func(p *Params) {}, nil},
		{"greedy", func(p *Params) { p.Temperature = 0 }, nil},
		{"temperature and truncation are ignored", func(p *Params) {
			p.Temperature, p.TopK, p.TopP, p.MinP = 0.3, 5, 0.5, 0.1
		}, nil},
		{"penalties and bias are included", func(p *Params) {
			p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty, p.LogitBias = 1.3, 0.5, 1, bias
		}, nil},
		{"mask is included", func(p *Params) {}, mask},
		{"greedy mask is included", func(p *Params) { p.Temperature = 0 }, mask},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := params(tt.set)
			p.Logprobs, p.TopLogprobs, p.Seed = true, MaxTopLogprobs, seed(8)
			in := Input{Logits: logits, Prompt: prompt, Output: output, Mask: tt.mask}

			dist := transformed(t, p, in)
			if tt.mask != nil {
				applyMask(dist, tt.mask)
			}
			want := refLogSoftmax(dist)
			order := make([]int, vocab)
			for i := range order {
				order[i] = i
			}
			slices.SortStableFunc(order, func(a, b int) int {
				switch {
				case want[a] > want[b]:
					return -1
				case want[a] < want[b]:
					return 1
				}
				return 0
			})

			s := newSampler(t, p, vocab)
			for range 5 {
				r := mustSample(t, s, in)
				if math.Abs(r.Logprob-want[r.ID]) > 1e-5 {
					t.Errorf("token %d: logprob %v, want %v", r.ID, r.Logprob, want[r.ID])
				}
				if len(r.Top) != MaxTopLogprobs {
					t.Fatalf("%d top logprobs, want %d", len(r.Top), MaxTopLogprobs)
				}
				for i, tl := range r.Top {
					if tl.ID != order[i] || math.Abs(tl.Logprob-want[tl.ID]) > 1e-5 {
						t.Errorf("top %d: got %+v, want {%d %v}", i, tl, order[i], want[order[i]])
					}
				}
			}
		})
	}
}

func TestLogprobsFewCandidates(t *testing.T) {
	logits := []float32{negInf, 2, negInf, 1}
	p := params(func(p *Params) { p.Logprobs, p.TopLogprobs, p.Temperature = true, 5, 0 })
	r := mustSample(t, newSampler(t, p, len(logits)), Input{Logits: logits})
	want := []float64{math.Log(math.E / (math.E + 1)), math.Log(1 / (math.E + 1))}
	if r.ID != 1 || math.Abs(r.Logprob-want[0]) > 1e-9 {
		t.Errorf("got %+v", r)
	}
	if len(r.Top) != 2 || r.Top[0].ID != 1 || r.Top[1].ID != 3 || math.Abs(r.Top[1].Logprob-want[1]) > 1e-9 {
		t.Errorf("top: got %+v", r.Top)
	}
	// Without logprobs nothing is reported.
	r = mustSample(t, newSampler(t, params(nil), len(logits)), Input{Logits: logits})
	if r.Logprob != 0 || r.Top != nil {
		t.Errorf("logprobs reported unasked: %+v", r)
	}
}
