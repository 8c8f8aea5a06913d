package sample

import (
	"math"
	"testing"
)

// chiSquareBound is the 0.999 quantile of the chi-square distribution with
// df degrees of freedom (Wilson–Hilferty approximation).
func chiSquareBound(df int) float64 {
	const z = 3.090 // 0.999 quantile of the standard normal
	k := float64(df)
	return k * math.Pow(1-2/(9*k)+z*math.Sqrt(2/(9*k)), 3)
}

// TestSamplingFrequencies draws 20,000 tokens per configuration and checks
// the frequencies against the reference distribution with a chi-square
// test. The seed is fixed, so the test cannot flake.
func TestSamplingFrequencies(t *testing.T) {
	const draws = 20000
	small := logitsOf(0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.04, 0.01)
	medium := randomLogits(64, 1, 5)
	tests := []struct {
		name   string
		logits []float32
		set    func(*Params)
	}{
		{"softmax", small, func(p *Params) {}},
		{"temperature 0.7", small, func(p *Params) { p.Temperature = 0.7 }},
		{"temperature 1.8", small, func(p *Params) { p.Temperature = 1.8 }},
		{"top_k 4", small, func(p *Params) { p.TopK = 4 }},
		{"top_p 0.8", small, func(p *Params) { p.TopP = 0.8; p.Temperature = 0.9 }},
		{"min_p 0.3", small, func(p *Params) { p.MinP = 0.3 }},
		{"medium softmax", medium, func(p *Params) {}},
		{"medium top_p", medium, func(p *Params) { p.TopP = 0.9; p.Temperature = 0.8 }},
		{"medium top_k min_p", medium, func(p *Params) { p.TopK = 30; p.MinP = 0.1 }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := params(tt.set)
			p.Seed = seed(int64(1000 + i))
			want := refProbs(tt.logits, p)
			s := newSampler(t, p, len(tt.logits))
			counts := make([]int, len(tt.logits))
			for range draws {
				counts[mustSample(t, s, Input{Logits: tt.logits}).ID]++
			}
			chiSquare(t, counts, want, draws)
		})
	}
}
