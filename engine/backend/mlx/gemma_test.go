//go:build cgo

package mlx

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
)

// testGemmaOps runs GELUTanhGate, Softcap, Scale and WindowAttention on both
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
	})

	t.Run("WindowAttention", func(t *testing.T) {
		const heads, kvh, hd, window = 4, 2, 16, 37
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
		run := func(sd *side, offsets, lens []int, q, k, v []float32, window int) []float32 {
			b := &backend.Batch{}
			n := 0
			for i := range offsets {
				b.Seqs = append(b.Seqs, backend.Seq{Cache: sd.caches[i], Offset: offsets[i], Len: lens[i]})
				n += lens[i]
			}
			s := sd.be.NewStep(context.Background())
			defer s.Close()
			var out backend.Array
			if window > 0 {
				out = s.WindowAttention(0, s.Input(n, qw, q), s.Input(n, kw, k), s.Input(n, kw, v), float32(1/math.Sqrt(hd)), window, b)
			} else {
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
			run(sd, zeros, history, q, k, v, 0)
		}
		offsets := append([]int(nil), history...)
		for i, lens := range steps {
			n := 0
			for _, l := range lens {
				n += l
			}
			q, k, v := randFloats(rng, n*qw, 1), randFloats(rng, n*kw, 1), randFloats(rng, n*kw, 1)
			got := run(sides[0], offsets, lens, q, k, v, window)
			want := run(sides[1], offsets, lens, q, k, v, window)
			d, err := within("WindowAttention", got, widen(want), nil, 1e-5)
			t.Logf("step %d: max |MLX − CPU| %.3g", i, d)
			if err != nil {
				t.Fatal(err)
			}
			for j := range offsets {
				offsets[j] += lens[j]
			}
		}
	})
}
