package sample

import (
	"math"
	"slices"
	"testing"
)

func TestTruncationKeepsExpectedSet(t *testing.T) {
	probs := logitsOf(0.5, 0.25, 0.15, 0.07, 0.03)
	tests := []struct {
		name string
		set  func(*Params)
		want []int
	}{
		{"nothing", func(p *Params) {}, []int{0, 1, 2, 3, 4}},
		{"top_k 3", func(p *Params) { p.TopK = 3 }, []int{0, 1, 2}},
		{"top_k 9 > vocab", func(p *Params) { p.TopK = 9 }, []int{0, 1, 2, 3, 4}},
		{"top_p 0.4", func(p *Params) { p.TopP = 0.4 }, []int{0}},
		{"top_p 0.6", func(p *Params) { p.TopP = 0.6 }, []int{0, 1}},
		{"top_p 0.8", func(p *Params) { p.TopP = 0.8 }, []int{0, 1, 2}},
		{"top_p 0.95", func(p *Params) { p.TopP = 0.95 }, []int{0, 1, 2, 3}},
		{"top_p 0.99", func(p *Params) { p.TopP = 0.99 }, []int{0, 1, 2, 3, 4}},
		{"min_p 0.1", func(p *Params) { p.MinP = 0.1 }, []int{0, 1, 2, 3}},
		{"min_p 0.2", func(p *Params) { p.MinP = 0.2 }, []int{0, 1, 2}},
		{"min_p 0.4", func(p *Params) { p.MinP = 0.4 }, []int{0, 1}},
		{"min_p 0.6", func(p *Params) { p.MinP = 0.6 }, []int{0}},
		{"min_p 1", func(p *Params) { p.MinP = 1 }, []int{0}},
		// top_p measures the distribution left by top_k: 0.5/0.75 = 0.67.
		{"top_k 2 then top_p 0.6", func(p *Params) { p.TopK, p.TopP = 2, 0.6 }, []int{0}},
		{"top_k 2 then top_p 0.7", func(p *Params) { p.TopK, p.TopP = 2, 0.7 }, []int{0, 1}},
		{"top_k 3 then min_p 0.2", func(p *Params) { p.TopK, p.MinP = 3, 0.2 }, []int{0, 1, 2}},
		// Temperature comes first: at T=2 the probabilities are
		// 0.348, 0.246, 0.190, 0.130, 0.085.
		{"T 2 top_p 0.45", func(p *Params) { p.Temperature, p.TopP = 2, 0.45 }, []int{0, 1}},
		{"T 1 top_p 0.45", func(p *Params) { p.TopP = 0.45 }, []int{0}},
		{"T 2 min_p 0.55", func(p *Params) { p.Temperature, p.MinP = 2, 0.55 }, []int{0, 1}},
		{"T 1 min_p 0.55", func(p *Params) { p.MinP = 0.55 }, []int{0}},
		{"T 0.5 top_p 0.8", func(p *Params) { p.Temperature, p.TopP = 0.5, 0.8 }, []int{0, 1}},
		{"top_p 0.6 and min_p 0.1", func(p *Params) { p.TopP, p.MinP = 0.6, 0.1 }, []int{0, 1}},
		{"top_p 0.95 and min_p 0.6", func(p *Params) { p.TopP, p.MinP = 0.95, 0.6 }, []int{0}},
		{"all three", func(p *Params) { p.TopK, p.TopP, p.MinP = 4, 0.99, 0.2 }, []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := params(tt.set)
			s := newSampler(t, p, len(probs))
			if got := keptIDs(s, probs); !slices.Equal(got, tt.want) {
				t.Errorf("kept %v, want %v", got, tt.want)
			}
			if ref := support(refProbs(probs, p)); !slices.Equal(ref, tt.want) {
				t.Errorf("test reference keeps %v, want %v", ref, tt.want)
			}
			// Sampling only ever returns kept tokens, and all of them.
			p.Seed = seed(1)
			s = newSampler(t, p, len(probs))
			seen := map[int]bool{}
			for range 2000 {
				seen[mustSample(t, s, Input{Logits: probs}).ID] = true
			}
			var got []int
			for id := range seen {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("sampled %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTruncationTiesGoToLowerIDs(t *testing.T) {
	logits := []float32{1, 3, 3, 3, 1, 3}
	for _, tt := range []struct {
		set  func(*Params)
		want []int
	}{
		{func(p *Params) { p.TopK = 2 }, []int{1, 2}},
		{func(p *Params) { p.TopK = 3 }, []int{1, 2, 3}},
		{func(p *Params) { p.TopP = 0.3 }, []int{1, 2}},
		{func(p *Params) { p.MinP = 0.5 }, []int{1, 2, 3, 5}},
	} {
		p := params(tt.set)
		if got := keptIDs(newSampler(t, p, len(logits)), logits); !slices.Equal(got, tt.want) {
			t.Errorf("%+v: kept %v, want %v", p, got, tt.want)
		}
	}
}

// TestTruncationMatchesReference checks the partitioning selections
// against full sorts on large random rows.
func TestTruncationMatchesReference(t *testing.T) {
	for i, std := range []float64{0.5, 2, 6} {
		logits := randomLogits(4000, std, uint64(i))
		for _, set := range []func(*Params){
			func(p *Params) { p.TopK = 40 },
			func(p *Params) { p.TopK = 256 },
			func(p *Params) { p.TopK = 257 },
			func(p *Params) { p.TopK = 3000 },
			func(p *Params) { p.TopP = 0.9 },
			func(p *Params) { p.TopP = 0.5; p.Temperature = 0.7 },
			func(p *Params) { p.TopP = 0.99; p.Temperature = 1.5 },
			func(p *Params) { p.MinP = 0.05 },
			func(p *Params) { p.MinP = 0.01; p.TopP = 0.8 },
			func(p *Params) { p.TopK = 1000; p.TopP = 0.95; p.MinP = 0.001 },
		} {
			p := params(set)
			got := keptIDs(newSampler(t, p, len(logits)), logits)
			want := support(refProbs(logits, p))
			if !slices.Equal(got, want) {
				t.Errorf("std %v %+v: kept %d tokens, reference %d", std, p, len(got), len(want))
			}
		}
	}
}

func TestSelectTopAndNucleus(t *testing.T) {
	// Many equal values stress the partitioning.
	for n := range 200 {
		c := make([]cand, n)
		for i := range c {
			c[i] = cand{int32(i), float32((i * 37) % 5)}
		}
		sorted := slices.Clone(c)
		slices.SortFunc(sorted, compareCands)
		for _, k := range []int{1, n / 3, n / 2, n - 1} {
			if k <= 0 || k > n {
				continue
			}
			got := slices.Clone(c)
			selectTop(got, k)
			got = got[:k]
			slices.SortFunc(got, compareCands)
			if !slices.Equal(got, sorted[:k]) {
				t.Fatalf("n %d k %d: selectTop wrong", n, k)
			}
			target := sumWeights(sorted[:k]) - 0.5
			if target <= 0 {
				continue
			}
			got = slices.Clone(c)
			m := nucleus(got, target)
			got = got[:m]
			slices.SortFunc(got, compareCands)
			want := sorted[:k]
			for len(want) > 1 && sumWeights(want[:len(want)-1]) >= target {
				want = want[:len(want)-1]
			}
			if !slices.Equal(got, want) {
				t.Fatalf("n %d target %v: nucleus kept %d, want %d", n, target, len(got), len(want))
			}
		}
	}
}

// TestNucleusStages covers the two threshold passes of nucleus and its
// fallback to partitioning.
func TestNucleusStages(t *testing.T) {
	var c []cand
	add := func(n int, w float32) {
		for range n {
			c = append(c, cand{int32(len(c)), w})
		}
	}
	add(1, 1)
	add(1, 0.5)
	add(100, 0x1p-10)
	add(1000, 0x1p-25)
	// Shuffle deterministically so that the passes have work to do.
	for i := range c {
		j := (i * 7919) % len(c)
		c[i], c[j] = c[j], c[i]
	}
	total := sumWeights(c)
	for _, tt := range []struct {
		target float64
		want   int
	}{
		{0.9, 1},                           // first pass
		{1.2, 2},                           // first pass
		{1.5 + 10.5*0x1p-10, 13},           // second pass
		{1.5 + 100*0x1p-10 + 0x1p-26, 103}, // fallback
		{total, len(c)},
		{total * 2, len(c)},
	} {
		got := slices.Clone(c)
		n := nucleus(got, tt.target)
		if n != tt.want {
			t.Errorf("target %v: kept %d, want %d", tt.target, n, tt.want)
			continue
		}
		sorted := slices.Clone(c)
		slices.SortFunc(sorted, compareCands)
		got = got[:n]
		slices.SortFunc(got, compareCands)
		if !slices.Equal(got, sorted[:n]) {
			t.Errorf("target %v: kept the wrong candidates", tt.target)
		}
	}
}

func TestTopKHeap(t *testing.T) {
	// Few distinct values, so that ties cross the chunks topKHeap skips.
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32((i * 7919) % 13)
	}
	logits[500] = negInf
	logits[501] = float32(math.NaN())
	var sorted []cand
	for i, v := range logits {
		if v > negInf {
			sorted = append(sorted, cand{int32(i), v})
		}
	}
	slices.SortFunc(sorted, compareCands)
	for _, k := range []int{1, 2, 40, 77, 128, 129, 500, len(sorted), len(sorted) + 5} {
		got := topKHeap(logits, k, nil)
		slices.SortFunc(got, compareCands)
		if want := sorted[:min(k, len(sorted))]; !slices.Equal(got, want) {
			t.Errorf("k %d: got %d candidates, not the %d best", k, len(got), len(want))
		}
	}
}
