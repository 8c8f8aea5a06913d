//go:build cgo

package mlx

import (
	"context"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/tensor"
)

// testDeltaNetOps runs CausalConv, GatedDelta (two sequences, two key
// heads read by four value heads, from a state) and SigmoidGate on both
// backends, every output; the CPU ones are checked against their formulas
// in package cpu.
func testDeltaNetOps(t *testing.T) {
	be, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(47, 48))
	const hk, dk, hv, dv, kernel = 2, 8, 4, 6, 4
	lens := []int{3, 5}
	rows, c := 8, 2*hk*dk+hv*dv
	x, convState, w := randFloats(rng, rows*c, 1), randFloats(rng, 2*(kernel-1)*c, 1), randFloats(rng, c*kernel, 0.5)
	a, b := randFloats(rng, rows*hv, 1), randFloats(rng, rows*hv, 1)
	aLog, dt := randFloats(rng, hv, 1), randFloats(rng, hv, 1)
	state := randFloats(rng, 2*hv*dv*dk, 0.3)
	gate := randFloats(rng, rows*hv*dv, 1)
	vector := func(b backend.Backend, v []float32) backend.Vector {
		out, err := b.Vector(backend.VectorData{Name: "v", Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(len(v))}, Data: f32Bytes(v)}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// run gives every output: conv, conv state, y, delta state, the gates.
	run := func(bk backend.Backend, s backend.Step, which int) backend.Array {
		r := s.(backend.RecurrentOps)
		conv, convNext := r.CausalConv(s.Input(rows, c, x), s.Input(2, (kernel-1)*c, convState), vector(bk, w), kernel, lens)
		conv = s.SiLU(conv)
		q, k, v := s.HeadSlice(conv, 1, 0, hk*dk), s.HeadSlice(conv, 1, hk*dk, 2*hk*dk), s.HeadSlice(conv, 1, 2*hk*dk, c)
		y, next := r.GatedDelta(q, k, v, s.Input(rows, hv, a), s.Input(rows, hv, b), s.Input(2, hv*dv*dk, state),
			vector(bk, aLog), vector(bk, dt), hk, lens)
		return []backend.Array{conv, convNext, y, next, r.SigmoidGate(y, s.Input(rows, hv*dv, gate)),
			r.SigmoidGate(y, s.Input(rows, 1, gate[:rows]))}[which]
	}
	for i, name := range []string{"conv", "conv state", "y", "delta state", "gate", "gate column"} {
		want := cpuRun(t, cpu.Options{}, func(cb *cpu.Backend, s backend.Step) backend.Array { return run(cb, s, i) })
		s := be.NewStep(context.Background())
		got, err := s.Read(run(be, s, i))
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		d, err := within(name, got, widen(want), nil, 1e-5)
		t.Logf("%s: max |MLX − CPU| %.3g", name, d)
		if err != nil {
			t.Error(err)
		}
	}
}
