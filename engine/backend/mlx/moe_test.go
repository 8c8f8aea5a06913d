//go:build cgo

package mlx

import (
	"context"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// testExpertOps runs ExpertLinear (dense and MLX 4-bit experts, rows in
// any order, an unused expert) and MixRows on both backends; the CPU ones
// are checked against their formulas in package cpu. Both compute in
// float32 and differ by summation order.
func testExpertOps(t *testing.T) {
	be, err := New(Options{Float32: true}) // the ops against the CPU formulas, in float32
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(41, 42))
	const n, out, in, tokens, group, bits = 4, 24, 64, 6, 32, 4
	dense := make([]backend.WeightData, n)
	quant := make([]backend.WeightData, n)
	for e := range n {
		w := randFloats(rng, out*in, 0.1)
		bias := tensor.Tensor{DType: tensor.F32, Shape: []int64{out}, Data: f32Bytes(randFloats(rng, out, 1))}
		dense[e] = backend.WeightData{Name: "dense", Format: backend.Dense, Out: out, In: in,
			Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{out, in}, Data: f32Bytes(w)}, Bias: &bias}
		quant[e] = affineData(t, "quant", w, out, in, group, bits)
	}
	x := randFloats(rng, tokens*in, 1)
	rows := []int{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5}
	which := []int{3, 1, 0, 3, 1, 0, 3, 0, 1, 3, 0, 1}
	mix := make([]float32, len(rows))
	for i := range mix {
		mix[i] = float32(rng.Float64())
	}
	upload := func(b backend.Backend, ds []backend.WeightData) []backend.Weight {
		ws := make([]backend.Weight, len(ds))
		for e, d := range ds {
			if ws[e], err = b.Weight(d); err != nil {
				t.Fatal(err)
			}
		}
		return ws
	}
	for _, c := range []struct {
		name string
		ds   []backend.WeightData
	}{{"dense", dense}, {"mlx-q4", quant}} {
		run := func(b backend.Backend, s backend.Step) backend.Array {
			return s.MixRows(s.ExpertLinear(s.Input(tokens, in, x), upload(b, c.ds), rows, which), 2, mix)
		}
		t.Run(c.name, func(t *testing.T) {
			want := cpuRun(t, cpu.Options{}, func(cb *cpu.Backend, s backend.Step) backend.Array { return run(cb, s) })
			s := be.NewStep(context.Background())
			defer s.Close()
			got, err := s.Read(run(be, s))
			if err != nil {
				t.Fatal(err)
			}
			d, err := within(c.name, got, widen(want), nil, 1e-5)
			t.Logf("max |MLX − CPU| %.3g", d)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// testFPLinear runs Linear and Embed on mxfp4, mxfp8 and nvfp4 weights on
// both backends: MLX's quantized_matmul and dequantize with the mode
// string against the CPU kernel (whose dequantization is checked
// bit-exact against mlx.core.dequantize in package modelfile).
func testFPLinear(t *testing.T) {
	be, err := New(Options{Float32: true}) // the ops against the CPU formulas, in float32
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(43, 44))
	const out, in, rows = 48, 128, 5
	w, x := randFloats(rng, out*in, 0.1), randFloats(rng, rows*in, 1)
	ids := []int32{3, 0, 47, 3}
	for _, mode := range []string{modelfile.ModeMXFP4, modelfile.ModeMXFP8, modelfile.ModeNVFP4} {
		t.Run(mode, func(t *testing.T) {
			f, _ := modelfile.FP(mode)
			codes, scales, err := modelfile.QuantizeFP(mode, tensor.F32, w, out, in)
			if err != nil {
				t.Fatal(err)
			}
			d := backend.WeightData{Name: mode, Format: backend.MLXFloat, Mode: mode, Out: out, In: in, Bits: f.Bits, Group: f.Group,
				Data:   tensor.Tensor{DType: tensor.U32, Shape: []int64{out, int64(modelfile.PackedCols(in, f.Bits))}, Data: codes},
				Scales: tensor.Tensor{DType: tensor.U8, Shape: []int64{out, int64(in / f.Group)}, Data: scales}}
			for _, op := range []struct {
				name string
				run  func(s backend.Step, w backend.Weight) backend.Array
				tol  float64
			}{
				{"Linear", func(s backend.Step, w backend.Weight) backend.Array { return s.Linear(s.Input(rows, in, x), w) }, 1e-5},
				{"Embed", func(s backend.Step, w backend.Weight) backend.Array { return s.Embed(w, ids) }, 0},
			} {
				run := func(b backend.Backend, s backend.Step) backend.Array {
					wt, err := b.Weight(d)
					if err != nil {
						t.Fatal(err)
					}
					return op.run(s, wt)
				}
				want := cpuRun(t, cpu.Options{}, func(cb *cpu.Backend, s backend.Step) backend.Array { return run(cb, s) })
				s := be.NewStep(context.Background())
				got, err := s.Read(run(be, s))
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				dd, err := within(mode+" "+op.name, got, widen(want), nil, op.tol)
				t.Logf("%s: max |MLX − CPU| %.3g", op.name, dd)
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
