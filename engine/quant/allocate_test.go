package quant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/tensor"
)

// planFigures is what a plan costs in bits and in the calibration
// objective.
func planFigures(sens []Sensitivity, plan []Width, dt tensor.DType) (bits int64, obj float64) {
	for i, s := range sens {
		for _, c := range s.Candidates {
			if c.Width == plan[i] {
				bits += c.costBits(s.Weights, dt)
				obj += s.cost(c)
			}
		}
	}
	return bits, obj
}

// randomSens is n tensors of multiples of 128×64 weights, each with every
// width of ws; the KL falls with the bits (×¼ per bit, as a weight error
// does) times a per-tensor sensitivity spread over three decades, with a
// little noise so that no two widths tie.
func randomSens(r *rand.Rand, n int, ws []Width) []Sensitivity {
	sens := make([]Sensitivity, n)
	for i := range sens {
		s := Sensitivity{Name: fmt.Sprintf("t%d", i), Weights: int64(1+r.IntN(6)) * 128 * 64, Calibrated: true}
		k := math.Pow(10, 3*r.Float64())
		for _, w := range ws {
			kl := k * math.Pow(0.25, float64(w.Bits)) * (64 / float64(w.GroupSize)) * (1 + 0.3*r.Float64())
			s.Candidates = append(s.Candidates, Candidate{Width: w, BitsPerWeight: w.BitsPerWeight(tensor.BF16), KL: kl})
		}
		sens[i] = s
	}
	return sens
}

// TestAllocateOptimal: on small random plans the allocation is the best
// of every combination within the budget (exhaustive search), never over
// the budget, at budgets from the smallest plan to the largest.
func TestAllocateOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 1))
	ws := []Width{{2, 64}, {3, 64}, {4, 64}, {4, 128}, {6, 64}, {8, 32}}
	for trial := range 20 {
		sens := randomSens(r, 4, ws)
		var lo, hi, weights int64
		for _, s := range sens {
			lo += Width{2, 64}.costBits(s.Weights, tensor.BF16)
			hi += Width{8, 32}.costBits(s.Weights, tensor.BF16)
			weights += s.Weights
		}
		for _, budget := range []float64{float64(lo), float64(lo+hi) / 2, 4.5 * float64(weights), float64(hi)} {
			plan, err := allocate(sens, tensor.BF16, budget)
			if err != nil {
				t.Fatal(err)
			}
			bits, obj := planFigures(sens, plan, tensor.BF16)
			if float64(bits) > budget {
				t.Fatalf("trial %d: plan takes %d bits over the budget %.0f", trial, bits, budget)
			}
			best := math.Inf(1)
			idx := make([]int, len(sens))
			for {
				p := make([]Width, len(sens))
				for i, k := range idx {
					p[i] = ws[k]
				}
				if b, o := planFigures(sens, p, tensor.BF16); float64(b) <= budget {
					best = min(best, o)
				}
				i := 0
				for ; i < len(idx); i++ {
					if idx[i]++; idx[i] < len(ws) {
						break
					}
					idx[i] = 0
				}
				if i == len(idx) {
					break
				}
			}
			if math.Abs(obj-best) > 1e-12*best {
				t.Errorf("trial %d budget %.0f: plan objective %.6g, the best is %.6g", trial, budget, obj, best)
			}
		}
	}
}

// TestAllocateMonotone: over budgets from the smallest plan to the
// largest, a larger budget never gives a worse objective, every plan is
// within its budget and uses most of it (24 tensors of 18 widths: the
// budget is counted in coarse units there).
func TestAllocateMonotone(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2))
	var ws []Width
	for _, b := range []int{2, 3, 4, 5, 6, 8} {
		for _, g := range []int{32, 64, 128} {
			ws = append(ws, Width{b, g})
		}
	}
	sens := randomSens(r, 24, ws)
	var weights int64
	for _, s := range sens {
		weights += s.Weights
	}
	prev := math.Inf(1)
	for target := 2.25; target <= 8.5; target += 0.25 {
		budget := target * float64(weights)
		plan, err := allocate(sens, tensor.BF16, budget)
		if err != nil {
			t.Fatalf("target %.3f: %v", target, err)
		}
		bits, obj := planFigures(sens, plan, tensor.BF16)
		if float64(bits) > budget {
			t.Fatalf("target %.3f: %d bits over the budget", target, bits)
		}
		if obj > prev {
			t.Errorf("target %.3f: objective %.6g above the smaller budget's %.6g", target, obj, prev)
		}
		if got := float64(bits) / float64(weights); got < target-0.05 && target < 8.25 {
			t.Errorf("target %.3f: the plan uses only %.3f bits per weight", target, got)
		}
		prev = obj
	}
	if _, err := allocate(sens, tensor.BF16, 2.2*float64(weights)); !errors.Is(err, ErrBadOptions) {
		t.Errorf("a budget below 2-bit in groups of 128 (2.25 bits per weight): %v, want ErrBadOptions", err)
	}
}

// TestWidthsKeepBase: widths that leave out Bits still plan with the base
// width among the candidates — the one calibration measures, the others
// scaled from it.
func TestWidthsKeepBase(t *testing.T) {
	src := demoDir(t, demo.Options{Hidden: 128, Intermediate: 256, Layers: 1})
	res, err := Quantize(context.Background(), src, filepath.Join(t.TempDir(), "q"),
		Options{Bits: 4, GroupSize: 64, TargetBits: 5, Widths: []int{2, 8}, Calibration: "A short text to calibrate on, read once."})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Plan {
		var ws []string
		measured := ""
		for _, c := range p.Candidates {
			ws = append(ws, c.Width.String())
			if !c.Estimated {
				measured = c.Width.String()
			}
		}
		if fmt.Sprint(ws) != "[2/64 4/64 8/64]" || measured != "4/64" {
			t.Errorf("%s: candidates %v, measured %q", p.Name, ws, measured)
		}
	}
	if res.BitsPerWeight > 5 {
		t.Errorf("%.3f bits per weight over the target", res.BitsPerWeight)
	}
}
