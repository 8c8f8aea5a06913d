package quant

import (
	"fmt"
	"math"

	"fusion/engine/tensor"
)

// maxPlanUnits bounds the resolution of the allocation's budget: costs
// are counted in units of the greatest common divisor of the tensors'
// extra costs, coarsened only when that would need more units than this
// (then each tensor may waste less than one unit of the budget).
const maxPlanUnits = 1 << 16

// allocate gives each tensor of sens one of its candidate widths so that
// the summed cost (Sensitivity.cost: KL divergence calibrated, squared
// error otherwise) is least while the bits stored for all of them —
// codes, scales and biases with scales of dt — stay within budget bits.
//
// It is a multiple-choice knapsack, solved exactly by dynamic programming
// over the budget: every tensor starts at its cheapest candidate, and
// what the others cost beyond that is counted in units (see
// maxPlanUnits), each rounded up, so the plan never exceeds the budget.
// The units do not depend on the budget, so a larger budget can only
// lower the cost found (its plans include the smaller one's). A budget
// below every tensor at its cheapest candidate, or above every tensor at
// its dearest, is ErrBadOptions.
func allocate(sens []Sensitivity, dt tensor.DType, budget float64) ([]Width, error) {
	n := len(sens)
	costs := make([][]int64, n)
	var floor, extraMax int64
	var unit int64
	for i, s := range sens {
		if len(s.Candidates) == 0 {
			return nil, fmt.Errorf("quant: %s has no candidate width", s.Name)
		}
		costs[i] = make([]int64, len(s.Candidates))
		lo, hi := int64(math.MaxInt64), int64(0)
		for k, c := range s.Candidates {
			costs[i][k] = c.costBits(s.Weights, dt)
			lo, hi = min(lo, costs[i][k]), max(hi, costs[i][k])
		}
		floor += lo
		extraMax += hi - lo
		for k := range costs[i] {
			costs[i][k] -= lo
			unit = gcd(unit, costs[i][k])
		}
	}
	if float64(floor) > budget {
		return nil, fmt.Errorf("%w: target_bits: the smallest plan takes %.0f bits, the budget is %.0f", ErrBadOptions, float64(floor), budget)
	}
	if float64(floor+extraMax) < budget {
		return nil, fmt.Errorf("%w: target_bits: the largest plan takes %.0f bits, below the budget of %.0f", ErrBadOptions, float64(floor+extraMax), budget)
	}
	unit = max(unit, (extraMax+maxPlanUnits-1)/maxPlanUnits, 1)
	units := make([][]int, n)
	total := 0
	for i := range costs {
		units[i] = make([]int, len(costs[i]))
		most := 0
		for k, c := range costs[i] {
			units[i][k] = int((c + unit - 1) / unit)
			most = max(most, units[i][k])
		}
		total += most
	}
	capacity := min(int(math.Floor((budget-float64(floor))/float64(unit))), total)
	// best[c]: the least cost of the tensors so far within c units;
	// choice[i][c]: the candidate of tensor i that achieves it.
	best := make([]float64, capacity+1)
	next := make([]float64, capacity+1)
	choice := make([][]uint8, n)
	for i, s := range sens {
		choice[i] = make([]uint8, capacity+1)
		for c := range next {
			next[c] = math.Inf(1)
		}
		for k, cand := range s.Candidates {
			u, v := units[i][k], s.cost(cand)
			for c := u; c <= capacity; c++ {
				// Strictly less: at equal cost the cheaper candidate
				// (listed first) stays.
				if x := best[c-u] + v; x < next[c] {
					next[c], choice[i][c] = x, uint8(k)
				}
			}
		}
		best, next = next, best
	}
	out := make([]Width, n)
	c := capacity
	for i := n - 1; i >= 0; i-- {
		k := choice[i][c]
		out[i] = sens[i].Candidates[k].Width
		c -= units[i][k]
	}
	return out, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
