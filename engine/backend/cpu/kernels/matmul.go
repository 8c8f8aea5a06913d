package kernels

import "fmt"

func checkMatMul(dst, x []float32, batch int, w Weights) {
	if batch < 1 {
		panic(fmt.Sprintf("kernels: batch %d < 1", batch))
	}
	if len(x) < batch*w.Cols() {
		panic(fmt.Sprintf("kernels: x has %d values, want %d·%d", len(x), batch, w.Cols()))
	}
	if len(dst) < batch*w.Rows() {
		panic(fmt.Sprintf("kernels: dst has %d values, want %d·%d", len(dst), batch, w.Rows()))
	}
}

// MatMul computes dst[b·R+o] = Σ_i x[b·C+i]·W[o][i] for b < batch, o < R,
// where W is w, R = w.Rows() and C = w.Cols(), on the calling goroutine.
// x and dst are row-major [batch, C] and [batch, R]; it panics if they are
// too short. It allocates its scratch memory per call; a Pool reuses it
// and spreads the rows over several cores.
func (k *Kernels) MatMul(dst, x []float32, batch int, w Weights) {
	checkMatMul(dst, x, batch, w)
	var a actBuf
	var s scratch
	w.prepare(&k.impl, x[:batch*w.Cols()], batch, &a)
	w.prepareRows(&k.impl, &a, 0, batch)
	w.mulRows(&k.impl, &a, dst, 0, w.Rows(), &s)
}

// MatMul is Default().MatMul.
func MatMul(dst, x []float32, batch int, w Weights) { bestKernels.MatMul(dst, x, batch, w) }
