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

// testHeadOps runs HeadSlice, HeadConcat and HeadLinear (dense and MLX
// 4-bit heads) on both backends; the CPU ones are checked against their
// formulas in package cpu.
func testHeadOps(t *testing.T) {
	be, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(45, 46))
	const rows, heads, in, out, group, bits = 5, 3, 64, 16, 32, 4
	x, y := randFloats(rng, rows*heads*in, 1), randFloats(rng, rows*heads*2, 1)
	dense := make([]backend.WeightData, heads)
	quant := make([]backend.WeightData, heads)
	for h := range heads {
		w := randFloats(rng, out*in, 0.1)
		dense[h] = backend.WeightData{Name: "dense", Format: backend.Dense, Out: out, In: in,
			Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{out, in}, Data: f32Bytes(w)}}
		quant[h] = affineData(t, "quant", w, out, in, group, bits)
	}
	upload := func(b backend.Backend, ds []backend.WeightData) []backend.Weight {
		ws := make([]backend.Weight, len(ds))
		for h, d := range ds {
			if ws[h], err = b.Weight(d); err != nil {
				t.Fatal(err)
			}
		}
		return ws
	}
	for _, c := range []struct {
		name string
		ds   []backend.WeightData
	}{{"dense", dense}, {"mlx-q4", quant}} {
		// The projection of each head, its features 3…9 joined to y's heads.
		run := func(b backend.Backend, s backend.Step) backend.Array {
			p := s.HeadLinear(s.Input(rows, heads*in, x), upload(b, c.ds))
			return s.HeadConcat(s.HeadSlice(p, heads, 3, 10), s.Input(rows, heads*2, y), heads)
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

// affineData is w [out, in] quantized to MLX affine codes, scales and
// biases in float32.
func affineData(t *testing.T, name string, w []float32, out, in, group, bits int) backend.WeightData {
	t.Helper()
	packed, scales, biases, err := modelfile.QuantizeAffine(w, out, in, group, bits)
	if err != nil {
		t.Fatal(err)
	}
	words := make([]byte, 0, 4*len(packed))
	for _, p := range packed {
		words = append(words, byte(p), byte(p>>8), byte(p>>16), byte(p>>24))
	}
	return backend.WeightData{Name: name, Format: backend.MLXAffine, Out: out, In: in, Bits: bits, Group: group,
		Data:   tensor.Tensor{DType: tensor.U32, Shape: []int64{int64(out), int64(modelfile.PackedCols(in, bits))}, Data: words},
		Scales: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(out), int64(in / group)}, Data: f32Bytes(scales)},
		Biases: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(out), int64(in / group)}, Data: f32Bytes(biases)}}
}
