package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// ExpertLinear is x[rows[i]]·W[which[i]]ᵀ + bias for every entry, in the
// given order, whatever order the experts come in (repeated rows and
// experts, an unused expert); MixRows is the weighted sum of each group
// of k rows.
func TestExpertOps(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	const n, out, in, tokens = 4, 24, 64, 6
	ws := make([][]float32, n)
	biases := make([][]float32, n)
	experts := make([]backend.Weight, n)
	for e := range n {
		ws[e], biases[e] = randFloats(rng, out*in), randFloats(rng, out)
		wt, bt := f32Tensor(ws[e]), f32Tensor(biases[e])
		wt.Shape = []int64{out, in}
		w, err := b.Weight(backend.WeightData{Name: "expert", Format: backend.Dense, Out: out, In: in, Data: wt, Bias: &bt})
		if err != nil {
			t.Fatal(err)
		}
		experts[e] = w
	}
	x := randFloats(rng, tokens*in)
	// Token t's two experts; expert 2 is never used.
	rows := []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}
	which := []int{3, 1, 0, 3, 1, 0, 3, 0, 1, 3, 0, 1}
	s := b.NewStep(context.Background())
	defer s.Close()
	y := s.ExpertLinear(s.Input(tokens, in, x), experts, rows, which)
	got := read(t, s, y)
	want := make([]float64, len(rows)*out)
	for i, r := range rows {
		e := which[i]
		for o := range out {
			acc := float64(biases[e][o])
			for c := range in {
				acc += float64(x[r*in+c]) * float64(ws[e][o*in+c])
			}
			want[i*out+o] = acc
		}
	}
	closeTo(t, "ExpertLinear", got, want, 1e-5)

	weights := make([]float32, len(rows))
	for i := range weights {
		weights[i] = float32(rng.Float64())
	}
	mixed := read(t, s, s.MixRows(y, 2, weights))
	wantMix := make([]float64, tokens*out)
	for tok := range tokens {
		for o := range out {
			for j := range 2 {
				wantMix[tok*out+o] += float64(weights[tok*2+j]) * float64(got[(tok*2+j)*out+o])
			}
		}
	}
	closeTo(t, "MixRows", mixed, wantMix, 1e-6)

	// One token alone gets the same bits as in the grouped batch.
	alone := read(t, s, s.ExpertLinear(s.Input(1, in, x[3*in:4*in]), experts, []int{0, 0}, []int{3, 0}))
	for i, v := range alone {
		if math.Float32bits(v) != math.Float32bits(got[6*out+i]) {
			t.Fatalf("token 3 alone: value %d is %v, in the batch %v", i, v, got[6*out+i])
		}
	}
}

// Bad arguments are shape errors: the op panics with what does not fit.
func TestExpertOpsShapes(t *testing.T) {
	b := New(Options{})
	defer b.Close()
	wt := f32Tensor(make([]float32, 8*4))
	wt.Shape = []int64{8, 4}
	w, err := b.Weight(backend.WeightData{Name: "e", Format: backend.Dense, Out: 8, In: 4, Data: wt})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(s backend.Step){
		"row out of range": func(s backend.Step) {
			s.ExpertLinear(s.Input(2, 4, make([]float32, 8)), []backend.Weight{w}, []int{2}, []int{0})
		},
		"expert out of range": func(s backend.Step) {
			s.ExpertLinear(s.Input(2, 4, make([]float32, 8)), []backend.Weight{w}, []int{0}, []int{1})
		},
		"width": func(s backend.Step) {
			s.ExpertLinear(s.Input(2, 2, make([]float32, 4)), []backend.Weight{w}, []int{0}, []int{0})
		},
		"lengths": func(s backend.Step) {
			s.ExpertLinear(s.Input(2, 4, make([]float32, 8)), []backend.Weight{w}, []int{0, 1}, []int{0})
		},
		"mix groups":  func(s backend.Step) { s.MixRows(s.Input(3, 4, make([]float32, 12)), 2, make([]float32, 3)) },
		"mix weights": func(s backend.Step) { s.MixRows(s.Input(4, 4, make([]float32, 16)), 2, make([]float32, 3)) },
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			s := b.NewStep(context.Background())
			defer s.Close()
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			run(s)
		})
	}
}
