package sample

import "testing"

const benchVocab = 151936

// benchLogits looks like a language model's row: most logits spread
// around 0, a few dozen plausible tokens well above them.
func benchLogits() []float32 {
	l := randomLogits(benchVocab, 2, 99)
	for i := range 40 {
		l[(i*7907)%benchVocab] += 8 + float32(i%10)
	}
	return l
}

// benchContext is a 2,000-token prompt+output.
func benchContext() (prompt, output []int) {
	ctx := make([]int, 2000)
	for i := range ctx {
		ctx[i] = (i * 104729) % benchVocab
	}
	return ctx[:1500], ctx[1500:]
}

func benchSample(b *testing.B, p Params, in Input) {
	p.Seed = seed(1)
	s := newSampler(b, p, benchVocab)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGreedy(b *testing.B) {
	benchSample(b, params(func(p *Params) { p.Temperature = 0 }), Input{Logits: benchLogits()})
}

func BenchmarkGreedyMaskAllowed(b *testing.B) {
	logits := benchLogits()
	mask := NewBitset(benchVocab)
	mask.Set(argmax(logits))
	benchSample(b, params(func(p *Params) { p.Temperature = 0 }), Input{Logits: logits, Mask: mask})
}

func BenchmarkGreedyMaskRejected(b *testing.B) {
	logits := benchLogits()
	mask := NewBitset(benchVocab)
	for id := 0; id < benchVocab; id += 2 {
		mask.Set(id)
	}
	if best := argmax(logits); best%2 == 0 {
		logits[best+1] = logits[best] + 1
	}
	benchSample(b, params(func(p *Params) { p.Temperature = 0 }), Input{Logits: logits, Mask: mask})
}

func BenchmarkTemperature(b *testing.B) {
	benchSample(b, params(func(p *Params) { p.Temperature = 0.8 }), Input{Logits: benchLogits()})
}

func BenchmarkTemperatureTopP(b *testing.B) {
	benchSample(b, params(func(p *Params) { p.Temperature, p.TopP = 0.8, 0.9 }), Input{Logits: benchLogits()})
}

func BenchmarkTopK40(b *testing.B) {
	benchSample(b, params(func(p *Params) { p.Temperature, p.TopK = 0.8, 40 }), Input{Logits: benchLogits()})
}

func BenchmarkTopK40TopP(b *testing.B) {
	benchSample(b, params(func(p *Params) { p.Temperature, p.TopK, p.TopP = 0.8, 40, 0.9 }), Input{Logits: benchLogits()})
}

func BenchmarkMinP(b *testing.B) {
	benchSample(b, params(func(p *Params) { p.Temperature, p.MinP = 0.8, 0.05 }), Input{Logits: benchLogits()})
}

func BenchmarkPenaltiesGreedy(b *testing.B) {
	prompt, output := benchContext()
	benchSample(b, params(func(p *Params) {
		p.Temperature, p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty = 0, 1.1, 0.5, 0.3
	}), Input{Logits: benchLogits(), Prompt: prompt, Output: output})
}

func BenchmarkPenaltiesTopP(b *testing.B) {
	prompt, output := benchContext()
	benchSample(b, params(func(p *Params) {
		p.Temperature, p.TopP = 0.8, 0.9
		p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty = 1.1, 0.5, 0.3
	}), Input{Logits: benchLogits(), Prompt: prompt, Output: output})
}

func BenchmarkPenaltiesTopK40(b *testing.B) {
	prompt, output := benchContext()
	benchSample(b, params(func(p *Params) {
		p.Temperature, p.TopK = 0.8, 40
		p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty = 1.1, 0.5, 0.3
	}), Input{Logits: benchLogits(), Prompt: prompt, Output: output})
}

func BenchmarkLogprobs(b *testing.B) {
	benchSample(b, params(func(p *Params) {
		p.Temperature, p.Logprobs, p.TopLogprobs = 0, true, 5
	}), Input{Logits: benchLogits()})
}
