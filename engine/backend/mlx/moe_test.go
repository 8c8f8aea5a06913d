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
	be, err := New(Options{})
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
		packed, scales, biases, err := modelfile.QuantizeAffine(w, out, in, group, bits)
		if err != nil {
			t.Fatal(err)
		}
		words := make([]byte, 0, 4*len(packed))
		for _, p := range packed {
			words = append(words, byte(p), byte(p>>8), byte(p>>16), byte(p>>24))
		}
		quant[e] = backend.WeightData{Name: "quant", Format: backend.MLXAffine, Out: out, In: in, Bits: bits, Group: group,
			Data:   tensor.Tensor{DType: tensor.U32, Shape: []int64{out, int64(modelfile.PackedCols(in, bits))}, Data: words},
			Scales: tensor.Tensor{DType: tensor.F32, Shape: []int64{out, in / group}, Data: f32Bytes(scales)},
			Biases: tensor.Tensor{DType: tensor.F32, Shape: []int64{out, in / group}, Data: f32Bytes(biases)}}
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
