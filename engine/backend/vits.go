package backend

import "fmt"

// VITSOps are the ops of VITS text-to-speech models (Piper voices) that
// the rest of the op set does not cover.
type VITSOps interface {
	// ReLU returns max(x, 0) elementwise.
	ReLU(x Array) Array
	// RelAttention is bidirectional attention with relative positions
	// over one sequence (VITS's text encoder, window w): relK and relV
	// are [2w+1, headDim] tables shared by the heads, row r standing for
	// the offset r−w of the key from the query. With q scaled by scale,
	// the score of query i for key j is q_i·k_j + q_i·relK[j−i+w] (the
	// second term only for |j−i| ≤ w), p is their softmax over j, and the
	// output is Σ_j p_j·v_j + Σ_{|j−i|≤w} p_j·relV[j−i+w]. q, k, v are
	// [rows, heads·headDim]; returns the same shape.
	RelAttention(q, k, v, relK, relV Array, heads int, scale float32) Array
	// LeakyReLU returns x for x ≥ 0 and slope·x below, elementwise
	// (HiFi-GAN's activation, slope 0.1 and 0.01).
	LeakyReLU(x Array, slope float32) Array
	// GatedTanh returns tanh(a)·sigmoid(b) elementwise (WaveNet's gated
	// activation in VITS's flow).
	GatedTanh(a, b Array) Array
}

// RelShape checks the arguments of Step.RelAttention and returns the head
// width and the window w, or an error saying what does not fit.
func RelShape(q, k, v, relK, relV Array, heads int) (headDim, window int, err error) {
	bad := heads <= 0 || q.Cols()%heads != 0 || q.Rows() == 0 ||
		k.Rows() != q.Rows() || v.Rows() != q.Rows() || k.Cols() != q.Cols() || v.Cols() != q.Cols()
	if !bad {
		headDim = q.Cols() / heads
		bad = relK.Rows()%2 != 1 || relV.Rows() != relK.Rows() || relK.Cols() != headDim || relV.Cols() != headDim
	}
	if bad {
		return 0, 0, fmt.Errorf("RelAttention: q [%d, %d], k [%d, %d], v [%d, %d], relK [%d, %d], relV [%d, %d], %d heads",
			q.Rows(), q.Cols(), k.Rows(), k.Cols(), v.Rows(), v.Cols(), relK.Rows(), relK.Cols(), relV.Rows(), relV.Cols(), heads)
	}
	return headDim, relK.Rows() / 2, nil
}
