package sample

import (
	"errors"
	"testing"
)

// countingMask allows the ids in allowed and counts its calls.
type countingMask struct {
	allowed map[int]bool
	calls   int
}

func (m *countingMask) Allowed(id int) bool {
	m.calls++
	return m.allowed[id]
}

func TestGreedyMask(t *testing.T) {
	logits := []float32{1, 9, 3, 8, 2, 8}
	tests := []struct {
		name      string
		allowed   []int
		want      int
		wantCalls int // -1: the whole row
	}{
		{"argmax allowed tests one token", []int{1, 3}, 1, 1},
		{"argmax masked", []int{0, 3, 4, 5}, 3, -1},
		{"argmax masked, ties to lowest id", []int{5, 3}, 3, -1},
		{"only a low token", []int{0}, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &countingMask{allowed: map[int]bool{}}
			bits := NewBitset(len(logits))
			for _, id := range tt.allowed {
				m.allowed[id] = true
				bits.Set(id)
			}
			p := params(func(p *Params) { p.Temperature = 0 })
			if got := mustSample(t, newSampler(t, p, len(logits)), Input{Logits: logits, Mask: m}).ID; got != tt.want {
				t.Errorf("mask func: got %d, want %d", got, tt.want)
			}
			wantCalls := tt.wantCalls
			if wantCalls < 0 {
				wantCalls = 1 + len(logits)
			}
			if m.calls != wantCalls {
				t.Errorf("mask called %d times, want %d", m.calls, wantCalls)
			}
			if got := mustSample(t, newSampler(t, p, len(logits)), Input{Logits: logits, Mask: bits}).ID; got != tt.want {
				t.Errorf("bitset: got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGreedyMaskAfterPenalties(t *testing.T) {
	// The penalty moves the argmax from 1 to 3, which the mask rejects.
	logits := []float32{1, 9, 3, 8, 2, 7.5}
	p := params(func(p *Params) { p.Temperature, p.FrequencyPenalty = 0, 2 })
	mask := MaskFunc(func(id int) bool { return id != 3 })
	r := mustSample(t, newSampler(t, p, len(logits)), Input{Logits: logits, Output: []int{1}, Mask: mask})
	if r.ID != 5 {
		t.Errorf("got %d, want 5", r.ID)
	}
	if logits[3] != 8 {
		t.Error("Sample modified the caller's logits")
	}
}

func TestSamplingMask(t *testing.T) {
	const vocab = 1000
	logits := randomLogits(vocab, 1, 11)
	bits := NewBitset(vocab)
	for id := 0; id < vocab; id += 3 {
		bits.Set(id)
	}
	bits.Set(vocab - 1) // last word partly used
	for _, set := range []func(*Params){
		func(p *Params) {},
		func(p *Params) { p.TopK = 10 },
		func(p *Params) { p.TopK = 700 },
		func(p *Params) { p.TopP = 0.5 },
		func(p *Params) { p.MinP = 0.3 },
	} {
		p := params(set)
		p.Seed = seed(3)
		for _, m := range []Mask{bits, MaskFunc(bits.Allowed)} {
			s := newSampler(t, p, vocab)
			for range 300 {
				if id := mustSample(t, s, Input{Logits: logits, Mask: m}).ID; !bits.Allowed(id) {
					t.Fatalf("%+v: masked token %d sampled", p, id)
				}
			}
		}
	}
	// top_k counts allowed tokens only: top_k=1 gives the best allowed.
	p := params(func(p *Params) { p.TopK = 1 })
	best := -1
	for id, v := range logits {
		if bits.Allowed(id) && (best < 0 || v > logits[best]) {
			best = id
		}
	}
	if got := mustSample(t, newSampler(t, p, vocab), Input{Logits: logits, Mask: bits}).ID; got != best {
		t.Errorf("top_k 1 under a mask: got %d, want %d", got, best)
	}
	for _, temp := range []float64{0, 1} {
		p := params(func(p *Params) { p.Temperature = temp })
		_, err := newSampler(t, p, vocab).Sample(Input{Logits: logits, Mask: NewBitset(vocab)})
		if !errors.Is(err, ErrNoCandidates) {
			t.Errorf("temperature %v, everything masked: got %v, want ErrNoCandidates", temp, err)
		}
	}
}

func TestBitset(t *testing.T) {
	b := NewBitset(130)
	for _, id := range []int{0, 63, 64, 129} {
		b.Set(id)
	}
	for id := -1; id < 200; id++ {
		want := id == 0 || id == 63 || id == 64 || id == 129
		if b.Allowed(id) != want {
			t.Errorf("Allowed(%d) = %v", id, !want)
		}
	}
	row := make([]float32, 130)
	applyMask(row, b)
	for id, v := range row {
		if masked := v == negInf; masked == b.Allowed(id) {
			t.Errorf("id %d: masked %v", id, masked)
		}
	}
	// A bitset shorter than the row rejects the ids past its end.
	row = make([]float32, 200)
	applyMask(row, b)
	if row[129] != 0 || row[130] != negInf || row[199] != negInf {
		t.Error("short bitset applied wrongly")
	}
}
