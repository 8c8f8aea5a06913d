package sample

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestGreedyIsArgmax(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	tests := []struct {
		name   string
		logits []float32
		want   int
	}{
		{"single max", []float32{0.1, 3, -2, 2.9}, 1},
		{"tie takes lowest id", []float32{1, 5, 0, 5, 5}, 1},
		{"all equal", []float32{7, 7, 7}, 0},
		{"last", []float32{-3, -2, -1}, 2},
		{"negative infinity skipped", []float32{negInf, -100, negInf}, 1},
		{"NaN never wins", []float32{nan, -1, nan, 0.5}, 3},
		{"positive infinity wins", []float32{3, inf, 4}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSampler(t, params(func(p *Params) { p.Temperature = 0 }), len(tt.logits))
			if got := mustSample(t, s, Input{Logits: tt.logits}).ID; got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGreedyLargeRowMatchesScan(t *testing.T) {
	base := randomLogits(151936, 3, 7)
	for _, tt := range []struct {
		name string
		set  map[int]float32
	}{
		{"random", nil},
		{"tie across chunks", map[int]float32{5000: 50, 2000: 50, 151935: 50}},
		{"tie inside a chunk", map[int]float32{3000: 50, 2999: 50}},
		{"last entry", map[int]float32{151935: 50}},
		{"first entry", map[int]float32{0: 50, 151935: 50}},
	} {
		logits := slices.Clone(base)
		for id, v := range tt.set {
			logits[id] = v
		}
		want := 0
		for i, v := range logits {
			if v > logits[want] {
				want = i
			}
		}
		s := newSampler(t, params(func(p *Params) { p.Temperature = 0 }), len(logits))
		if got := mustSample(t, s, Input{Logits: logits}).ID; got != want {
			t.Errorf("%s: got %d, want %d", tt.name, got, want)
		}
	}
}

func TestTopK1IsGreedy(t *testing.T) {
	rows := [][]float32{
		{1, 5, 0, 5, 5},
		randomLogits(1000, 2, 1),
		randomLogits(5000, 0.01, 2),
	}
	for _, temp := range []float64{0.01, 0.7, 1, 5, 100} {
		for i, logits := range rows {
			greedy := newSampler(t, params(func(p *Params) { p.Temperature = 0 }), len(logits))
			topk := newSampler(t, params(func(p *Params) { p.Temperature, p.TopK = temp, 1 }), len(logits))
			want := mustSample(t, greedy, Input{Logits: logits}).ID
			for range 20 {
				if got := mustSample(t, topk, Input{Logits: logits}).ID; got != want {
					t.Fatalf("row %d, temperature %v: top_k=1 gave %d, greedy %d", i, temp, got, want)
				}
			}
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	logits := randomLogits(1000, 0.5, 3)
	run := func(p Params) []int {
		s := newSampler(t, p, len(logits))
		ids := make([]int, 200)
		for i := range ids {
			ids[i] = mustSample(t, s, Input{Logits: logits}).ID
		}
		return ids
	}
	for _, p := range []Params{
		params(func(p *Params) { p.Seed = seed(42) }),
		params(func(p *Params) { p.Seed, p.TopP, p.Temperature = seed(42), 0.9, 0.8 }),
		params(func(p *Params) { p.Seed, p.TopK = seed(42), 40 }),
		params(func(p *Params) { p.Seed, p.TopK, p.MinP = seed(42), 500, 0.2 }),
	} {
		a, b := run(p), run(p)
		if !slices.Equal(a, b) {
			t.Errorf("%+v: same seed gave different sequences", p)
		}
		p2 := p
		p2.Seed = seed(43)
		if slices.Equal(a, run(p2)) {
			t.Errorf("%+v: seeds 42 and 43 gave the same sequence", p)
		}
		p2.Seed = nil
		if slices.Equal(run(p2), run(p2)) {
			t.Errorf("%+v: two unseeded samplers gave the same sequence", p)
		}
	}
}

func TestStopTokens(t *testing.T) {
	logits := []float32{0, 1, 5, 2}
	for _, tt := range []struct {
		stop []int
		want bool
	}{{nil, false}, {[]int{0, 1}, false}, {[]int{3, 2}, true}} {
		s := newSampler(t, params(func(p *Params) { p.Temperature, p.StopTokenIDs = 0, tt.stop }), len(logits))
		r := mustSample(t, s, Input{Logits: logits})
		if r.ID != 2 || r.Stop != tt.want {
			t.Errorf("stop %v: got %+v, want id 2 stop %v", tt.stop, r, tt.want)
		}
	}
}

func TestSampleErrors(t *testing.T) {
	s := newSampler(t, params(func(p *Params) { p.RepetitionPenalty = 1.1 }), 4)
	if _, err := s.Sample(Input{Logits: make([]float32, 3)}); err == nil {
		t.Error("short row accepted")
	}
	if _, err := s.Sample(Input{Logits: make([]float32, 4), Prompt: []int{1, 4}}); err == nil {
		t.Error("out-of-range prompt id accepted")
	}
	if _, err := s.Sample(Input{Logits: make([]float32, 4), Output: []int{-1}}); err == nil {
		t.Error("negative output id accepted")
	}
	// The failed calls must not leave penalty state behind.
	if len(s.pen.entries) != 0 || slices.ContainsFunc(s.pen.slot, func(v int32) bool { return v != 0 }) {
		t.Error("penalty scratch not reset after an error")
	}
	for _, temp := range []float64{0, 1} {
		s := newSampler(t, params(func(p *Params) { p.Temperature = temp }), 3)
		_, err := s.Sample(Input{Logits: []float32{negInf, negInf, float32(math.NaN())}})
		if !errors.Is(err, ErrNoCandidates) {
			t.Errorf("temperature %v: got %v, want ErrNoCandidates", temp, err)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	const vocab = 151936
	logits := randomLogits(vocab, 2, 4)
	ctx := make([]int, 2000)
	for i := range ctx {
		ctx[i] = (i * 7919) % vocab
	}
	bits := NewBitset(vocab)
	for i := 0; i < vocab; i += 2 {
		bits.Set(i)
	}
	for _, tt := range []struct {
		name string
		p    Params
		in   Input
	}{
		{"greedy", params(func(p *Params) { p.Temperature = 0 }), Input{Logits: logits}},
		{"greedy masked", params(func(p *Params) { p.Temperature = 0 }), Input{Logits: logits, Mask: bits}},
		{"top_p", params(func(p *Params) { p.TopP = 0.9 }), Input{Logits: logits}},
		{"top_k", params(func(p *Params) { p.TopK = 40 }), Input{Logits: logits}},
		{"top_k large", params(func(p *Params) { p.TopK = 1000 }), Input{Logits: logits}},
		{"min_p", params(func(p *Params) { p.MinP = 0.05; p.TopP = 0.95 }), Input{Logits: logits}},
		{"penalties", params(func(p *Params) {
			p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty = 1.1, 0.5, 0.5
			p.LogitBias = map[int]float64{5: 3}
		}), Input{Logits: logits, Prompt: ctx[:1000], Output: ctx[1000:]}},
		{"logprobs", params(func(p *Params) { p.Logprobs = true }), Input{Logits: logits}},
	} {
		s := newSampler(t, tt.p, vocab)
		mustSample(t, s, tt.in)
		allocs := testing.AllocsPerRun(5, func() { mustSample(t, s, tt.in) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per call", tt.name, allocs)
		}
	}
}

func TestPositiveInfinityLogits(t *testing.T) {
	inf := float32(math.Inf(1))
	logits := []float32{3, inf, 4, inf}
	for _, set := range []func(*Params){
		func(p *Params) {},
		func(p *Params) { p.TopK = 3 },
		func(p *Params) { p.TopP = 0.9 },
	} {
		p := params(set)
		p.Seed, p.Logprobs = seed(2), true
		s := newSampler(t, p, len(logits))
		seen := map[int]int{}
		for range 200 {
			r := mustSample(t, s, Input{Logits: logits})
			seen[r.ID]++
			if math.Abs(r.Logprob-math.Log(0.5)) > 1e-12 {
				t.Fatalf("%+v: logprob %v, want log 0.5", p, r.Logprob)
			}
		}
		if len(seen) != 2 || seen[1] == 0 || seen[3] == 0 {
			t.Errorf("%+v: sampled %v, want ids 1 and 3", p, seen)
		}
	}
}

// TestRNGState: a sampler handed another's generator state draws what
// that one would have, step after step, so sampling can move between
// processes without changing a seeded sequence; a bad state is an error.
func TestRNGState(t *testing.T) {
	p := params(func(p *Params) { p.Temperature, p.Seed = 0.9, seed(42) })
	logits := randomLogits(500, 3, 5)
	a, b := newSampler(t, p, 500), newSampler(t, p, 500)
	other := params(func(p *Params) { p.Temperature, p.Seed = 0.9, seed(7) })
	c := newSampler(t, other, 500)
	for step := range 50 {
		want := mustSample(t, a, Input{Logits: logits})
		// c starts from another seed: only the state handed over makes it
		// draw a's numbers.
		if err := c.SetRNGState(b.RNGState()); err != nil {
			t.Fatal(err)
		}
		got := mustSample(t, c, Input{Logits: logits})
		if err := b.SetRNGState(c.RNGState()); err != nil {
			t.Fatal(err)
		}
		if got.ID != want.ID {
			t.Fatalf("step %d: %d with the handed state, want %d", step, got.ID, want.ID)
		}
	}
	if err := c.SetRNGState([]byte("nonsense")); err == nil {
		t.Error("a bad generator state was accepted")
	}
}
