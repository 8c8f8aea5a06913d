package backend

import "fmt"

// RecurrentOps are the ops of Gated DeltaNet linear attention (mlx-lm's
// qwen3_next and qwen3_5 families). A sequence's recurrent state is not a
// cache the backend keeps: the model hands each sequence's state in as an
// array (one row per sequence, in batch order) and takes the new state
// back, so the state lives with the model's Sequence (part of Step).
type RecurrentOps interface {
	// CausalConv is a depthwise causal convolution over time with its
	// state: the rows of x [rows, C] are sequences of lens[i] rows, one
	// after the other, and state [len(lens), (kernel−1)·C] holds each
	// sequence's last kernel−1 inputs before them (row-major, oldest
	// first). With in = [state rows; x rows] of a sequence,
	// out[t][c] = Σ_j w[c·kernel + j]·in[t+j][c] (mlx nn.Conv1d with
	// groups = C and the weight [C, kernel, 1]), and the sequence's new
	// state is the last kernel−1 rows of in. Returns out [rows, C] and the
	// new state, the shape of state.
	CausalConv(x, state Array, w Vector, kernel int, lens []int) (out, newState Array)
	// GatedDelta runs the gated delta rule token by token over each
	// sequence (rows split by lens as in CausalConv). q, k are [rows,
	// hk·dk], v [rows, hv·dv], a and b [rows, hv]; value head h reads key
	// head h/(hv/hk). state is [len(lens), hv·dv·dk], per head a [dv, dk]
	// matrix S (mlx-lm's [B, Hv, Dv, Dk]). Per token, in float32:
	//
	//	g = exp(−exp(aLog[h])·softplus(a + dtBias[h])),  β = sigmoid(b)
	//	S ← g·S;  δ = (v − S·k)·β;  S ← S + δ·kᵀ;  y = S·q
	//
	// Returns y [rows, hv·dv] and the new state (mlx-lm's
	// gated_delta_update; q and k arrive normalized and scaled).
	GatedDelta(q, k, v, a, b, state Array, aLog, dtBias Vector, kHeads int, lens []int) (y, newState Array)
	// SigmoidGate returns x·sigmoid(g) elementwise; g is as wide as x, or
	// one column broadcast over each row (Qwen3-Next's gated attention
	// output and shared-expert gate).
	SigmoidGate(x, g Array) Array
}

// ConvStateShape checks the arguments of CausalConv.
func ConvStateShape(x, state Array, w Vector, kernel int, lens []int) error {
	rows := 0
	for _, n := range lens {
		if n <= 0 {
			return fmt.Errorf("CausalConv: sequence of %d rows", n)
		}
		rows += n
	}
	if kernel < 2 || rows != x.Rows() || w.Len() != kernel*x.Cols() || state.Rows() != len(lens) || state.Cols() != (kernel-1)*x.Cols() {
		return fmt.Errorf("CausalConv: x [%d, %d], state [%d, %d], weight %d, kernel %d, %d rows in %d sequences",
			x.Rows(), x.Cols(), state.Rows(), state.Cols(), w.Len(), kernel, rows, len(lens))
	}
	return nil
}

// DeltaShape checks the arguments of GatedDelta and returns the head
// counts and widths.
func DeltaShape(q, k, v, a, b, state Array, aLog, dtBias Vector, kHeads int, lens []int) (hk, dk, hv, dv int, err error) {
	rows := 0
	for _, n := range lens {
		if n <= 0 {
			return 0, 0, 0, 0, fmt.Errorf("GatedDelta: sequence of %d rows", n)
		}
		rows += n
	}
	hv = a.Cols()
	bad := kHeads <= 0 || hv <= 0 || hv%kHeads != 0 || q.Cols()%kHeads != 0 || v.Cols()%hv != 0
	if !bad {
		hk, dk, dv = kHeads, q.Cols()/kHeads, v.Cols()/hv
		bad = k.Cols() != q.Cols() || b.Cols() != hv || aLog.Len() != hv || dtBias.Len() != hv ||
			q.Rows() != rows || k.Rows() != rows || v.Rows() != rows || a.Rows() != rows || b.Rows() != rows ||
			state.Rows() != len(lens) || state.Cols() != hv*dv*dk
	}
	if bad {
		return 0, 0, 0, 0, fmt.Errorf("GatedDelta: q [%d, %d], k [%d, %d], v [%d, %d], a [%d, %d], b [%d, %d], state [%d, %d], %d key heads, %d rows in %d sequences",
			q.Rows(), q.Cols(), k.Rows(), k.Cols(), v.Rows(), v.Cols(), a.Rows(), a.Cols(), b.Rows(), b.Cols(), state.Rows(), state.Cols(), kHeads, rows, len(lens))
	}
	return hk, dk, hv, dv, nil
}
