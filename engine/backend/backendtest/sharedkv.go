package backendtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// SharedKV checks attention without k and v (Gemma 4's KV sharing) on
// be: in one step, layer 0 appends k and v and attends, then queries q2
// attend over layer 0's cache without appending; the result must equal,
// bit for bit, q2 attending in layer 1 after appending the same k and v
// there. A batch of a prefill past the window, a decode step after
// history and a short chunk, with and without a window, over two steps.
func SharedKV(t *testing.T, be backend.Backend) {
	t.Helper()
	const heads, kvh, hd = 4, 2, 16
	qw, kw := heads*hd, kvh*hd
	rng := rand.New(rand.NewPCG(51, 52))
	rnd := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64())
		}
		return out
	}
	for _, window := range []int{0, 23} {
		t.Run(fmt.Sprintf("window%d", window), func(t *testing.T) {
			spec := backend.KVSpec{Layers: 2, KVHeads: kvh, HeadDim: hd, MaxLen: 256}
			var caches []backend.KVCache
			for range 3 {
				c, err := be.NewKVCache(spec)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Free()
				caches = append(caches, c)
			}
			offsets := []int{0, 0, 0}
			for step, lens := range [][]int{{40, 1, 7}, {1, 30, 3}} {
				b := &backend.Batch{}
				n := 0
				for i, c := range caches {
					b.Seqs = append(b.Seqs, backend.Seq{Cache: c, Offset: offsets[i], Len: lens[i]})
					n += lens[i]
				}
				q1, q2, k, v := rnd(n*qw), rnd(n*qw), rnd(n*kw), rnd(n*kw)
				s := be.NewStep(context.Background())
				attend := func(layer int, q []float32, k, v backend.Array) backend.Array {
					if window > 0 {
						return s.WindowAttention(layer, s.Input(n, qw, q), k, v, 0.25, window, b)
					}
					return s.Attention(layer, s.Input(n, qw, q), k, v, 0.25, b)
				}
				attend(0, q1, s.Input(n, kw, k), s.Input(n, kw, v))
				shared := attend(0, q2, nil, nil)
				own := attend(1, q2, s.Input(n, kw, k), s.Input(n, kw, v))
				got, err := s.Read(shared)
				if err != nil {
					t.Fatal(err)
				}
				want, err := s.Read(own)
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("step %d: value %d is %g without k and v, %g with them", step, i, got[i], want[i])
					}
				}
				for i := range offsets {
					offsets[i] += lens[i]
					if l := caches[i].Len(0); l != offsets[i] {
						t.Fatalf("step %d: layer 0 of sequence %d holds %d positions, want %d", step, i, l, offsets[i])
					}
				}
			}
		})
	}
}
