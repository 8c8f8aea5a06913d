//go:build cgo

package mlx

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/backendtest"
	"fusion/engine/backend/cpu"
	"fusion/engine/tensor"
)

// testGemmaOps runs GELUTanhGate, Softcap, Scale, WindowAttention and
// gpt-oss's ClampedSwiGLU and SinkAttention on both
// backends (the CPU ones are checked against their formulas in package
// cpu). WindowAttention runs a batch of a long prefill past the window, a
// decode step deep into a sequence and a short chunk after history, then
// one more step on the caches it filled.
func testGemmaOps(t *testing.T) {
	be, err := New(Options{Float32: true}) // the ops against the CPU formulas, in float32
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	cb := cpu.New(cpu.Options{})
	defer cb.Close()
	rng := rand.New(rand.NewPCG(41, 42))
	const rows, cols = 6, 64
	g, u := randFloats(rng, rows*cols, 3), randFloats(rng, rows*cols, 1)
	x := randFloats(rng, rows*cols, 60)
	compareWithCPU(t, be, []opCase{
		{"GELUTanhGate", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.GELUTanhGate(s.Input(rows, cols, g), s.Input(rows, cols, u))
		}, 1e-5},
		{"Softcap", func(_ backend.Backend, s backend.Step) backend.Array { return s.Softcap(s.Input(rows, cols, x), 30) }, 1e-4},
		{"Scale", func(_ backend.Backend, s backend.Step) backend.Array { return s.Scale(s.Input(rows, cols, x), 11.3125) }, 1e-6},
		// gpt-oss's activation, on values crossing ±limit.
		{"ClampedSwiGLU", func(_ backend.Backend, s backend.Step) backend.Array {
			return s.ClampedSwiGLU(s.Input(rows, cols, x), s.Input(rows, cols, g), 1.702, 7)
		}, 1e-5},
	})

	const heads, kvh, hd = 4, 2, 16
	sinks := randFloats(rng, heads, 3) // gpt-oss's per-head sink logits
	for _, c := range []struct {
		name   string
		window int
		sinks  []float32
	}{{"WindowAttention", 37, nil}, {"SinkAttention", 0, sinks}, {"SinkAttention/window", 37, sinks}} {
		t.Run(c.name, func(t *testing.T) { testAttentionVariant(t, be, cb, rng, heads, kvh, hd, c.window, c.sinks) })
	}
}

// testAttentionVariant compares WindowAttention (sinks nil) or
// SinkAttention on both backends.
func testAttentionVariant(t *testing.T, be *Backend, cb *cpu.Backend, rng *rand.Rand, heads, kvh, hd, window int, sinks []float32) {
	{
		qw, kw := heads*hd, kvh*hd
		spec := backend.KVSpec{Layers: 1, KVHeads: kvh, HeadDim: hd, MaxLen: 1024}
		history := []int{5, 300, 20}
		steps := [][]int{{120, 1, 50}, {1, 1, 1}} // new rows per sequence, two steps
		type side struct {
			be     backend.Backend
			caches []backend.KVCache
		}
		sides := []*side{{be: be}, {be: cb}}
		for _, sd := range sides {
			for range history {
				c, err := sd.be.NewKVCache(spec)
				if err != nil {
					t.Fatal(err)
				}
				sd.caches = append(sd.caches, c)
			}
		}
		run := func(sd *side, offsets, lens []int, q, k, v []float32, window int, sinks []float32) []float32 {
			b := &backend.Batch{}
			n := 0
			for i := range offsets {
				b.Seqs = append(b.Seqs, backend.Seq{Cache: sd.caches[i], Offset: offsets[i], Len: lens[i]})
				n += lens[i]
			}
			s := sd.be.NewStep(context.Background())
			defer s.Close()
			var out backend.Array
			scale := float32(1 / math.Sqrt(float64(hd)))
			switch {
			case sinks != nil:
				sv, err := sd.be.Vector(backend.VectorData{Name: "sinks", Data: tensor.Tensor{DType: tensor.F32, Shape: []int64{int64(len(sinks))}, Data: f32Bytes(sinks)}})
				if err != nil {
					t.Fatal(err)
				}
				out = s.SinkAttention(0, s.Input(n, qw, q), s.Input(n, kw, k), s.Input(n, kw, v), scale, window, sv, b)
			case window > 0:
				out = s.WindowAttention(0, s.Input(n, qw, q), s.Input(n, kw, k), s.Input(n, kw, v), scale, window, b)
			default:
				out = s.Attention(0, s.Input(n, qw, q), s.Input(n, kw, k), s.Input(n, kw, v), 1, b)
			}
			got, err := s.Read(out)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		zeros := make([]int, len(history))
		n := 0
		for _, h := range history {
			n += h
		}
		q, k, v := randFloats(rng, n*qw, 1), randFloats(rng, n*kw, 1), randFloats(rng, n*kw, 1)
		for _, sd := range sides { // the history, through plain attention
			run(sd, zeros, history, q, k, v, 0, nil)
		}
		offsets := append([]int(nil), history...)
		for i, lens := range steps {
			n := 0
			for _, l := range lens {
				n += l
			}
			q, k, v := randFloats(rng, n*qw, 1), randFloats(rng, n*kw, 1), randFloats(rng, n*kw, 1)
			got := run(sides[0], offsets, lens, q, k, v, window, sinks)
			want := run(sides[1], offsets, lens, q, k, v, window, sinks)
			d, err := within(t.Name(), got, widen(want), nil, 1e-5)
			t.Logf("step %d: max |MLX − CPU| %.3g", i, d)
			if err != nil {
				t.Fatal(err)
			}
			for j := range offsets {
				offsets[j] += lens[j]
			}
		}
	}
}

// testSharedKV: attention without k and v reads the rows an earlier
// layer of the step appended (Gemma 4's KV sharing), on MLX as on the CPU.
func testSharedKV(t *testing.T) {
	be, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	backendtest.SharedKV(t, be)
}

// testKVWidths: a KV cache whose layers have different head widths
// (Gemma 4's wider full-attention layers), on MLX as on the CPU.
func testKVWidths(t *testing.T) {
	be, err := New(Options{Float32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	backendtest.KVWidths(t, be)
}
