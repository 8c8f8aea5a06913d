package backendtest

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// KVWidths checks a KV cache whose layers have different head widths
// (KVSpec.HeadDims, Gemma 4's wider full-attention layers) on be: every
// layer's attention is bit-identical to the same rows in a cache of that
// layer alone at its width, over a prefill, a chunk crossing 256
// positions and a decode step; Bytes and KVBytes count each layer at its
// width; ReadKV is the single-width caches' blocks one after the other,
// and AppendKV of it into a fresh cache gives the same attention after.
func KVWidths(t *testing.T, be backend.Backend) {
	t.Helper()
	const heads, kvh, first, maxLen = 4, 2, 2, 300
	widths := []int{8, 16, 8}
	rng := rand.New(rand.NewPCG(61, 62))
	rnd := func(n int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64())
		}
		return out
	}
	newCache := func(spec backend.KVSpec) backend.KVCache {
		c, err := be.NewKVCache(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Free)
		return c
	}
	spec := backend.KVSpec{FirstLayer: first, Layers: len(widths), KVHeads: kvh, HeadDim: 8, HeadDims: widths, MaxLen: maxLen}
	if _, err := be.NewKVCache(backend.KVSpec{Layers: 2, KVHeads: kvh, HeadDim: 8, HeadDims: widths, MaxLen: maxLen}); err == nil {
		t.Error("a spec with 3 head widths for 2 layers was accepted")
	}
	wide := newCache(spec)
	singles := make([]backend.KVCache, len(widths))
	for i, w := range widths {
		singles[i] = newCache(backend.KVSpec{FirstLayer: first + i, Layers: 1, KVHeads: kvh, HeadDim: w, MaxLen: maxLen})
	}
	// step runs n new rows at offset through every layer of both a (the
	// wide cache or a copy) and the single-width caches (nil: skipped),
	// and returns a's outputs.
	step := func(a backend.KVCache, singles []backend.KVCache, offset, n int) [][]float32 {
		var outs [][]float32
		for i, w := range widths {
			q, k, v := rnd(n*heads*w), rnd(n*kvh*w), rnd(n*kvh*w)
			attend := func(c backend.KVCache) []float32 {
				s := be.NewStep(context.Background())
				defer s.Close()
				b := &backend.Batch{Seqs: []backend.Seq{{Cache: c, Offset: offset, Len: n}}}
				out, err := s.Read(s.Attention(first+i, s.Input(n, heads*w, q), s.Input(n, kvh*w, k), s.Input(n, kvh*w, v), 0.3, b))
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			got := attend(a)
			if singles != nil {
				want := attend(singles[i])
				for j := range want {
					if got[j] != want[j] {
						t.Fatalf("layer %d (width %d), %d rows at %d: value %d is %g, %g in a cache of that width alone", first+i, w, n, offset, j, got[j], want[j])
					}
				}
			}
			outs = append(outs, got)
		}
		return outs
	}
	offset := 0
	for _, n := range []int{40, 230, 1} {
		step(wide, singles, offset, n)
		offset += n
	}
	perPos := 0
	for _, w := range widths {
		perPos += 2 * kvh * w * 4
	}
	if _, used := wide.Bytes(); used != int64(offset*perPos) {
		t.Errorf("Bytes: %d in use, want %d", used, offset*perPos)
	}
	if got := wide.KVBytes(3); got != 3*perPos {
		t.Errorf("KVBytes(3) = %d, want %d", got, 3*perPos)
	}
	block, err := wide.ReadKV(0, offset)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, c := range singles {
		b, err := c.ReadKV(0, offset)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b...)
	}
	if !bytes.Equal(block, want) {
		t.Fatalf("ReadKV: %d bytes, not the single-width caches' %d bytes one after the other", len(block), len(want))
	}
	fresh := newCache(spec)
	if err := fresh.AppendKV(block); err != nil {
		t.Fatal(err)
	}
	if fresh.Len(first+1) != offset {
		t.Fatalf("AppendKV: layer %d holds %d positions, want %d", first+1, fresh.Len(first+1), offset)
	}
	// The same next rows through the original and the imported cache.
	seed := rng.Uint64()
	rng = rand.New(rand.NewPCG(seed, 1))
	a := step(wide, nil, offset, 2)
	rng = rand.New(rand.NewPCG(seed, 1))
	b := step(fresh, nil, offset, 2)
	for i := range a {
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				t.Fatalf("after AppendKV: layer %d value %d is %g, %g in the original cache", first+i, j, b[i][j], a[i][j])
			}
		}
	}
}
