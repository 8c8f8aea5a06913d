package kernels

import (
	"fmt"
	"math"
)

func sameLen(op string, n int, others ...int) {
	for _, m := range others {
		if m != n {
			panic(fmt.Sprintf("kernels: %s: length %d != %d", op, m, n))
		}
	}
}

// Dot returns Σ a[i]·b[i]. It panics if the lengths differ.
func (k *Kernels) Dot(a, b []float32) float32 {
	sameLen("Dot", len(a), len(b))
	return k.impl.dotF32(a, b)
}

// Axpy computes y += alpha·x. It panics if the lengths differ.
func (k *Kernels) Axpy(alpha float32, x, y []float32) {
	sameLen("Axpy", len(x), len(y))
	k.impl.axpy(alpha, x, y)
}

// Add computes dst = a + b elementwise; dst may alias a or b.
func (k *Kernels) Add(dst, a, b []float32) {
	sameLen("Add", len(dst), len(a), len(b))
	k.impl.add(dst, a, b)
}

// Mul computes dst = a·b elementwise; dst may alias a or b.
func (k *Kernels) Mul(dst, a, b []float32) {
	sameLen("Mul", len(dst), len(a), len(b))
	k.impl.mul(dst, a, b)
}

// Scale computes dst = s·x; dst may alias x.
func (k *Kernels) Scale(dst, x []float32, s float32) {
	sameLen("Scale", len(dst), len(x))
	k.impl.scale(dst, x, s)
}

// RMSNorm computes dst = x·(mean(x²)+eps)^(-1/2)·weight in f32, the
// product with weight taken after normalization as MLX does; weight may
// be nil (no weight). dst may alias x.
func (k *Kernels) RMSNorm(dst, x, weight []float32, eps float32) {
	sameLen("RMSNorm", len(dst), len(x))
	if len(x) == 0 {
		return
	}
	ss := k.impl.dotF32(x, x)
	r := float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
	k.impl.scale(dst, x, r)
	if weight != nil {
		sameLen("RMSNorm weight", len(dst), len(weight))
		k.impl.mul(dst, dst, weight)
	}
}

// Softmax replaces x with softmax(x) = e^(x-max)/Σ e^(x-max), in f32.
// -Inf entries become 0; an all -Inf row, or any NaN, gives NaNs.
func (k *Kernels) Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	sum := k.impl.expSubSum(x, k.impl.maxf(x))
	k.impl.scale(x, x, 1/sum)
}

// SwiGLU computes dst = silu(gate)·up = gate·up/(1+e^(-gate)); dst may
// alias gate or up.
func (k *Kernels) SwiGLU(dst, gate, up []float32) {
	sameLen("SwiGLU", len(dst), len(gate), len(up))
	k.impl.swiglu(dst, gate, up)
}

// Dot is Default().Dot.
func Dot(a, b []float32) float32 { return bestKernels.Dot(a, b) }

// Axpy is Default().Axpy.
func Axpy(alpha float32, x, y []float32) { bestKernels.Axpy(alpha, x, y) }

// Add is Default().Add.
func Add(dst, a, b []float32) { bestKernels.Add(dst, a, b) }

// Mul is Default().Mul.
func Mul(dst, a, b []float32) { bestKernels.Mul(dst, a, b) }

// Scale is Default().Scale.
func Scale(dst, x []float32, s float32) { bestKernels.Scale(dst, x, s) }

// RMSNorm is Default().RMSNorm.
func RMSNorm(dst, x, weight []float32, eps float32) { bestKernels.RMSNorm(dst, x, weight, eps) }

// Softmax is Default().Softmax.
func Softmax(x []float32) { bestKernels.Softmax(x) }

// SwiGLU is Default().SwiGLU.
func SwiGLU(dst, gate, up []float32) { bestKernels.SwiGLU(dst, gate, up) }
