package backend

import "fmt"

// HeadOps are per-head ops over arrays whose rows hold heads side by
// side, [rows, heads·width] (part of Step): what multi-head latent
// attention (DeepSeek-V3's MLA) needs to split, join and project heads.
type HeadOps interface {
	// HeadSlice returns features [from, to) of each head of x, [rows,
	// heads·(to−from)] (mlx: reshape to [rows, heads, width], slice the
	// last axis, reshape back).
	HeadSlice(x Array, heads, from, to int) Array
	// HeadConcat joins the heads of a and b: head h of the result is head h
	// of a followed by head h of b, [rows, heads·(wa+wb)] (mlx: concatenate
	// along the last axis of [rows, heads, w]). With heads 1 it joins
	// columns.
	HeadConcat(a, b Array, heads int) Array
	// HeadLinear multiplies each head of x ([rows, len(ws)·In]) by its own
	// matrix: head h of the result is x_h·ws[h]ᵀ, [rows, len(ws)·Out]
	// (mlx-lm's MultiLinear, quantized or not; every head's matrix has the
	// same shape).
	HeadLinear(x Array, ws []Weight) Array
}

// HeadSliceShape checks the arguments of HeadSlice and returns the width
// of one head of x.
func HeadSliceShape(x Array, heads, from, to int) (width int, err error) {
	if heads <= 0 || x.Cols()%heads != 0 {
		return 0, fmt.Errorf("HeadSlice: %d features in %d heads", x.Cols(), heads)
	}
	width = x.Cols() / heads
	if from < 0 || to <= from || to > width {
		return 0, fmt.Errorf("HeadSlice: features [%d, %d) of heads of %d", from, to, width)
	}
	return width, nil
}

// HeadConcatShape checks the arguments of HeadConcat and returns the head
// widths of a and b.
func HeadConcatShape(a, b Array, heads int) (wa, wb int, err error) {
	if heads <= 0 || a.Rows() != b.Rows() || a.Cols()%heads != 0 || b.Cols()%heads != 0 {
		return 0, 0, fmt.Errorf("HeadConcat: [%d, %d] and [%d, %d] in %d heads", a.Rows(), a.Cols(), b.Rows(), b.Cols(), heads)
	}
	return a.Cols() / heads, b.Cols() / heads, nil
}

// HeadLinearShape checks the arguments of HeadLinear and returns the
// heads' [out, in].
func HeadLinearShape(x Array, ws []Weight) (out, in int, err error) {
	if len(ws) == 0 {
		return 0, 0, fmt.Errorf("HeadLinear: no heads")
	}
	out, in = ws[0].Out(), ws[0].In()
	for h, w := range ws {
		if w.Out() != out || w.In() != in {
			return 0, 0, fmt.Errorf("HeadLinear: head %d is [%d, %d], head 0 [%d, %d]", h, w.Out(), w.In(), out, in)
		}
	}
	if x.Cols() != len(ws)*in {
		return 0, 0, fmt.Errorf("HeadLinear: input has %d features, %d heads take %d each", x.Cols(), len(ws), in)
	}
	return out, in, nil
}
