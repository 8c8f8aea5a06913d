package cpu

import (
	"context"
	"math/rand/v2"
	"testing"

	"fusion/engine/backend"
)

// Attention at Qwen3-0.6B's shape (16 query heads, 8 KV heads of 128), one
// layer: a decode step at 600 positions, and a 512-token prefill.
func benchAttention(b *testing.B, history, rows int) {
	be := New(Options{})
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	spec := backend.KVSpec{Layers: 1, KVHeads: 8, HeadDim: 128, MaxLen: 4096}
	cache, _ := be.NewKVCache(spec)
	qw, kw := 16*128, 8*128
	if history > 0 {
		s := be.NewStep(context.Background())
		hb := &backend.Batch{Seqs: []backend.Seq{{Cache: cache, Len: history}}}
		s.Attention(0, s.Input(history, qw, randFloats(rng, history*qw)), s.Input(history, kw, randFloats(rng, history*kw)), s.Input(history, kw, randFloats(rng, history*kw)), 0.1, hb)
		s.Close()
	}
	q, k, v := randFloats(rng, rows*qw), randFloats(rng, rows*kw), randFloats(rng, rows*kw)
	batch := &backend.Batch{Seqs: []backend.Seq{{Cache: cache, Offset: history, Len: rows}}}
	b.ResetTimer()
	for range b.N {
		s := be.NewStep(context.Background())
		s.Attention(0, s.Input(rows, qw, q), s.Input(rows, kw, k), s.Input(rows, kw, v), 0.1, batch)
		s.Close()
	}
}

func BenchmarkAttentionDecode600(b *testing.B)  { benchAttention(b, 600, 1) }
func BenchmarkAttentionPrefill512(b *testing.B) { benchAttention(b, 0, 512) }

// Restoring and saving the KV of a 64-position block at Qwen3-0.6B's shape
// (28 layers, 8 KV heads of 128: 14 MiB), as the prefix cache does.
func BenchmarkKVAppend64(b *testing.B) {
	spec := backend.KVSpec{Layers: 28, KVHeads: 8, HeadDim: 128, MaxLen: 64 * 32}
	be := New(Options{})
	defer be.Close()
	src, _ := be.NewKVCache(spec)
	blk := make([]byte, src.KVBytes(64))
	b.SetBytes(int64(len(blk)))
	b.ResetTimer()
	for i := range b.N {
		if i%32 == 0 {
			src.Truncate(0)
		}
		if err := src.AppendKV(blk); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKVRead64(b *testing.B) {
	spec := backend.KVSpec{Layers: 28, KVHeads: 8, HeadDim: 128, MaxLen: 64}
	be := New(Options{})
	defer be.Close()
	c, _ := be.NewKVCache(spec)
	if err := c.AppendKV(make([]byte, c.KVBytes(64))); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(c.KVBytes(64)))
	b.ResetTimer()
	for range b.N {
		if _, err := c.ReadKV(0, 64); err != nil {
			b.Fatal(err)
		}
	}
}
