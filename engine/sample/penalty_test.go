package sample

import (
	"math"
	"slices"
	"testing"
)

// transformed returns the logits after mask, penalties and bias.
func transformed(t *testing.T, p Params, in Input) []float32 {
	t.Helper()
	s := newSampler(t, p, len(in.Logits))
	out := slices.Clone(in.Logits)
	if err := s.pen.apply(out, in.Prompt, in.Output); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPenaltyFormulas(t *testing.T) {
	logits := []float32{2, -1.5, 0, 3.25, -4, 1, 0.5, -0.25}
	prompt := []int{0, 1, 1, 4}
	output := []int{1, 3, 3, 3, 6}
	// Per id: occurrences in the output, and whether it is in the prompt.
	count := []float64{0, 1, 0, 3, 0, 0, 1, 0}
	inContext := []bool{true, true, false, true, true, false, true, false}

	tests := []struct {
		name                        string
		repeat, presence, frequency float64
		window                      int
		bias                        map[int]float64
		want                        func(id int, l float64) float64
	}{
		{
			name: "repetition 1.3", repeat: 1.3,
			want: func(id int, l float64) float64 {
				if !inContext[id] {
					return l
				}
				if l > 0 {
					return l / 1.3
				}
				return l * 1.3
			},
		},
		{
			name: "repetition 0.5 rewards", repeat: 0.5,
			want: func(id int, l float64) float64 {
				if !inContext[id] {
					return l
				}
				if l > 0 {
					return l / 0.5
				}
				return l * 0.5
			},
		},
		{
			// The last 4 tokens are 3, 3, 3, 6.
			name: "repetition window 4", repeat: 2, window: 4,
			want: func(id int, l float64) float64 {
				if id != 3 && id != 6 {
					return l
				}
				return l / 2
			},
		},
		{
			// The last 6 tokens are 4 (prompt), 1, 3, 3, 3, 6.
			name: "repetition window 6", repeat: 2, window: 6,
			want: func(id int, l float64) float64 {
				switch id {
				case 1, 4:
					return l * 2
				case 3, 6:
					return l / 2
				}
				return l
			},
		},
		{
			name: "presence 0.7", presence: 0.7,
			want: func(id int, l float64) float64 {
				if count[id] > 0 {
					return l - 0.7
				}
				return l
			},
		},
		{
			name: "frequency -0.4", frequency: -0.4,
			want: func(id int, l float64) float64 { return l + 0.4*count[id] },
		},
		{
			name: "presence and frequency", presence: 1.5, frequency: 0.25,
			want: func(id int, l float64) float64 {
				if count[id] > 0 {
					return l - 1.5 - 0.25*count[id]
				}
				return l
			},
		},
		{
			name: "all then bias", repeat: 1.2, presence: 0.5, frequency: 0.5,
			bias: map[int]float64{3: 2.5, 2: -1},
			want: func(id int, l float64) float64 {
				if inContext[id] {
					if l > 0 {
						l /= 1.2
					} else {
						l *= 1.2
					}
				}
				if count[id] > 0 {
					l -= 0.5 + 0.5*count[id]
				}
				switch id {
				case 3:
					l += 2.5
				case 2:
					l--
				}
				return l
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := params(func(p *Params) {
				p.PresencePenalty, p.FrequencyPenalty = tt.presence, tt.frequency
				p.RepetitionWindow, p.LogitBias = tt.window, tt.bias
				if tt.repeat != 0 {
					p.RepetitionPenalty = tt.repeat
				}
			})
			got := transformed(t, p, Input{Logits: logits, Prompt: prompt, Output: output})
			for id, l := range logits {
				if want := float32(tt.want(id, float64(l))); got[id] != want {
					t.Errorf("id %d: logit %v became %v, want %v", id, l, got[id], want)
				}
			}
		})
	}
}

func TestPenaltiesChangeGreedyChoice(t *testing.T) {
	logits := []float32{1, 4, 3.5, 0}
	greedy := func(p Params, prompt, output []int) int {
		p.Temperature = 0
		return mustSample(t, newSampler(t, p, len(logits)), Input{Logits: logits, Prompt: prompt, Output: output}).ID
	}
	if got := greedy(DefaultParams(), []int{1}, []int{1}); got != 1 {
		t.Errorf("no penalty: got %d, want 1", got)
	}
	if got := greedy(params(func(p *Params) { p.RepetitionPenalty = 1.2 }), []int{1}, nil); got != 2 {
		t.Errorf("repetition penalty on the prompt: got %d, want 2", got)
	}
	// Presence and frequency count the output only.
	pres := params(func(p *Params) { p.PresencePenalty = 1 })
	if got := greedy(pres, []int{1, 1, 1}, nil); got != 1 {
		t.Errorf("presence penalty on prompt tokens: got %d, want 1", got)
	}
	if got := greedy(pres, nil, []int{1}); got != 2 {
		t.Errorf("presence penalty: got %d, want 2", got)
	}
	freq := params(func(p *Params) { p.FrequencyPenalty = 0.2 })
	if got := greedy(freq, nil, []int{1, 1}); got != 1 {
		t.Errorf("frequency penalty, 2 occurrences: got %d, want 1", got)
	}
	if got := greedy(freq, nil, []int{1, 1, 1}); got != 2 {
		t.Errorf("frequency penalty, 3 occurrences: got %d, want 2", got)
	}
}

func TestLogitBiasBansAndForces(t *testing.T) {
	logits := randomLogits(500, 2, 9)
	best := argmax(logits)
	worst := 0
	for i, v := range logits {
		if v < logits[worst] {
			worst = i
		}
	}
	for _, temp := range []float64{0, 0.7, 1, 2} {
		ban := params(func(p *Params) {
			p.Temperature, p.Seed = temp, seed(5)
			p.LogitBias = map[int]float64{best: -100}
		})
		s := newSampler(t, ban, len(logits))
		for range 2000 {
			if mustSample(t, s, Input{Logits: logits}).ID == best {
				t.Fatalf("temperature %v: banned token %d sampled", temp, best)
			}
		}
		force := params(func(p *Params) {
			p.Temperature, p.Seed = temp, seed(5)
			p.RepetitionPenalty, p.FrequencyPenalty = 1.5, 2
			p.LogitBias = map[int]float64{worst: 100}
		})
		s = newSampler(t, force, len(logits))
		for range 2000 {
			// The penalties do not undo the bias, which comes last.
			if id := mustSample(t, s, Input{Logits: logits, Output: []int{worst, worst}}).ID; id != worst {
				t.Fatalf("temperature %v: forced token %d not sampled, got %d", temp, worst, id)
			}
		}
	}
}

func TestRepetitionWindow(t *testing.T) {
	prompt, output := []int{1, 2, 3}, []int{4, 5}
	for _, tt := range []struct {
		n      int
		wp, wo []int
	}{
		{0, []int{1, 2, 3}, []int{4, 5}},
		{1, nil, []int{5}},
		{2, nil, []int{4, 5}},
		{3, []int{3}, []int{4, 5}},
		{5, []int{1, 2, 3}, []int{4, 5}},
		{64, []int{1, 2, 3}, []int{4, 5}},
	} {
		wp, wo := repetitionWindow(prompt, output, tt.n)
		if !slices.Equal(wp, tt.wp) || !slices.Equal(wo, tt.wo) {
			t.Errorf("window %d: got %v %v, want %v %v", tt.n, wp, wo, tt.wp, tt.wo)
		}
	}
}

func TestPenaltiesKeepNegativeInfinity(t *testing.T) {
	logits := []float32{negInf, 1, negInf}
	p := params(func(p *Params) {
		p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty = 0.5, -2, -2
		p.LogitBias = map[int]float64{0: 100}
	})
	got := transformed(t, p, Input{Logits: logits, Prompt: []int{0, 2}, Output: []int{0, 2}})
	if !math.IsInf(float64(got[0]), -1) || !math.IsInf(float64(got[2]), -1) {
		t.Errorf("got %v, want -Inf kept", got)
	}
}
