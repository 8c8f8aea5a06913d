//go:build cgo

package mlx

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/tensor"
)

// testEncoderOps runs LayerNorm, GELU, EncoderAttention (ragged
// sequences), CrossAttention and Conv1D on both backends; the CPU ones are checked against their
// formulas in package cpu. Both compute in float32 and differ by
// summation order and MLX's erf approximation.
func testEncoderOps(t *testing.T) {
	be, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	cb := cpu.New(cpu.Options{})
	defer cb.Close()
	rng := rand.New(rand.NewPCG(31, 32))
	const heads, hd = 4, 8
	const cols = heads * hd
	lens := []int{3, 1, 9}
	rows := 13
	x, q, k, v := randFloats(rng, rows*cols, 2), randFloats(rng, rows*cols, 1), randFloats(rng, rows*cols, 1), randFloats(rng, rows*cols, 1)
	for i := range x[:cols] {
		x[i] += 50 // a row far from zero mean
	}
	w, b := randFloats(rng, cols, 1), randFloats(rng, cols, 1)
	scale := float32(1 / math.Sqrt(hd))
	vec := func(be backend.Backend, data []float32) backend.Vector {
		out, err := be.Vector(backend.VectorData{Name: "v", Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(len(data))}, Data: f32Bytes(data)}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	compareWithCPU(t, be, []opCase{
		{"LayerNorm", func(be backend.Backend, s backend.Step) backend.Array {
			return s.LayerNorm(s.Input(rows, cols, x), vec(be, w), vec(be, b), 1e-12)
		}, 1e-5},
		{"GELU", func(_ backend.Backend, s backend.Step) backend.Array { return s.GELU(s.Input(rows, cols, x)) }, 1e-5},
		{"EncoderAttention", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.EncoderAttention(s.Input(rows, cols, q), s.Input(rows, cols, k), s.Input(rows, cols, v), heads, scale, lens)
		}, 1e-5},
		{"CrossAttention", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.CrossAttention(s.Input(4, cols, q[:4*cols]), s.Input(rows, cols, k), s.Input(rows, cols, v), heads, scale)
		}, 1e-5},
	})
	// Conv1D: Whisper's stem shapes (kernel 3, pad 1, stride 1 and 2) and
	// a wider stride, odd lengths included.
	for _, c := range []struct{ rows, kernel, stride, pad int }{{13, 3, 1, 1}, {13, 3, 2, 1}, {12, 3, 2, 1}, {13, 5, 3, 2}} {
		const out = 6
		cw, cb := randFloats(rng, out*c.kernel*cols, 0.3), randFloats(rng, out, 1)
		weight := func(be backend.Backend) backend.Weight {
			bt := tensor.Tensor{DType: tensor.F32, Shape: []int64{out}, Data: f32Bytes(cb)}
			w, err := be.Weight(backend.WeightData{Name: "conv", Format: backend.Dense, Out: out, In: c.kernel * cols,
				Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{out, int64(c.kernel * cols)}, Data: f32Bytes(cw)}, Bias: &bt})
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		compareWithCPU(t, be, []opCase{{fmt.Sprintf("Conv1D/%d-k%d-s%d-p%d", c.rows, c.kernel, c.stride, c.pad),
			func(be backend.Backend, s backend.Step) backend.Array {
				return s.Conv1D(s.Input(c.rows, cols, x[:c.rows*cols]), weight(be), c.kernel, c.stride, c.pad)
			}, 1e-5}})
	}
}

// opCase is an op to run on both backends, and how close they must be.
type opCase struct {
	name string
	run  func(be backend.Backend, s backend.Step) backend.Array
	tol  float64
}

// compareWithCPU runs each op on be and on the CPU backend and wants the
// results within the op's tolerance.
func compareWithCPU(t *testing.T, be *Backend, ops []opCase) {
	t.Helper()
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			want := cpuRun(t, cpu.Options{}, func(c *cpu.Backend, s backend.Step) backend.Array { return op.run(c, s) })
			s := be.NewStep(context.Background())
			defer s.Close()
			got, err := s.Read(op.run(be, s))
			if err != nil {
				t.Fatal(err)
			}
			d, err := within(op.name, got, widen(want), nil, op.tol)
			t.Logf("max |MLX − CPU| %.3g", d)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
