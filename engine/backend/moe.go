package backend

import "fmt"

// ExpertOps are the ops of a mixture-of-experts block (part of Step).
type ExpertOps interface {
	// ExpertLinear computes out[i] = x[rows[i]]·W[experts[i]]ᵀ (+ that
	// expert's bias): every row of the result through the matrix of its
	// own expert, [len(rows), Out]. All experts have the same shape. The
	// backend groups the rows by expert, one product per expert used,
	// whatever their order (mlx gather_mm/gather_qmm with lhs and rhs
	// indices); the result keeps the given order.
	ExpertLinear(x Array, experts []Weight, rows, which []int) Array
	// MixRows sums every k consecutive rows of x weighted by weights:
	// out[t] = Σ_j weights[t·k+j]·x[t·k+j] for j = 0 … k−1 in that order,
	// [x.Rows()/k, x.Cols()] (the weighted sum of a token's experts).
	MixRows(x Array, k int, weights []float32) Array
}

// ExpertShape checks the arguments of ExpertLinear and returns the
// experts' [out, in], or an error saying what does not fit; backends
// panic with it (a shape error is a bug of the model code).
func ExpertShape(x Array, experts []Weight, rows, which []int) (out, in int, err error) {
	if len(experts) == 0 || len(rows) != len(which) {
		return 0, 0, fmt.Errorf("ExpertLinear: %d experts, %d rows, %d expert indices", len(experts), len(rows), len(which))
	}
	out, in = experts[0].Out(), experts[0].In()
	for e, w := range experts {
		if w.Out() != out || w.In() != in {
			return 0, 0, fmt.Errorf("ExpertLinear: expert %d is [%d, %d], expert 0 [%d, %d]", e, w.Out(), w.In(), out, in)
		}
	}
	if x.Cols() != in {
		return 0, 0, fmt.Errorf("ExpertLinear: input has %d features, experts take %d", x.Cols(), in)
	}
	for i, r := range rows {
		if r < 0 || r >= x.Rows() || which[i] < 0 || which[i] >= len(experts) {
			return 0, 0, fmt.Errorf("ExpertLinear: entry %d: row %d of %d, expert %d of %d", i, r, x.Rows(), which[i], len(experts))
		}
	}
	return out, in, nil
}

// MixShape checks the arguments of MixRows.
func MixShape(x Array, k int, weights []float32) error {
	if k <= 0 || x.Rows()%k != 0 || len(weights) != x.Rows() {
		return fmt.Errorf("MixRows: %d rows in groups of %d with %d weights", x.Rows(), k, len(weights))
	}
	return nil
}

// GroupByExpert returns the entries of which grouped by expert: for each
// expert used, in increasing expert order, the positions i with which[i]
// equal to it, in increasing order.
func GroupByExpert(which []int, experts int) (used []int, members [][]int) {
	byExpert := make([][]int, experts)
	for i, e := range which {
		byExpert[e] = append(byExpert[e], i)
	}
	for e, m := range byExpert {
		if len(m) > 0 {
			used = append(used, e)
			members = append(members, m)
		}
	}
	return used, members
}
