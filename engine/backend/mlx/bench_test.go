//go:build cgo

package mlx

import (
	"context"
	"path/filepath"
	"testing"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/model"
)

// BenchmarkDecode times one greedy decode step (batch of one, 128
// positions cached) of a Qwen3-shaped model with Qwen3-0.6B's layer
// widths (hidden 1024, 16 heads of 128, 8 KV heads, intermediate 3072;
// 4 layers, MLX 4-bit) on the MLX backend and on the CPU backend.
//
// Measured on the 2-core test VM (busy): MLX 82 ms, CPU 7.5 ms a step.
// The MLX time is MLX's own: a CPU profile shows < 1% in Go, and one
// quantized_matmul of [1, 1024] by a 4-bit [3072, 1024] takes 4.5 ms in
// the mlx-cpu wheel (a bf16 matmul of the same size 13 ms: reference
// BLAS). mlx-lm runs on the same kernels.
func BenchmarkDecode(b *testing.B) {
	if err := Available(); err != nil {
		b.Skip(err)
	}
	dir := filepath.Join(b.TempDir(), "m")
	if _, err := demo.Create(dir, demo.Options{Arch: "qwen3", Layers: 4, Hidden: 1024, Heads: 16, KVHeads: 8, HeadDim: 128,
		Intermediate: 3072, Quantize: 4, GroupSize: 64, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		open func() (backend.Backend, error)
	}{
		{"mlx", func() (backend.Backend, error) { return New(Options{}) }},
		{"cpu", func() (backend.Backend, error) { return cpu.New(cpu.Options{}), nil }},
	} {
		b.Run(c.name, func(b *testing.B) {
			be, err := c.open()
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			ctx := context.Background()
			m, err := model.Load(ctx, dir, be, model.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			seq, err := m.NewSequence(4096)
			if err != nil {
				b.Fatal(err)
			}
			defer seq.Close()
			if _, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: promptTokens(1, 128)}}, model.Range{}, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.Forward(ctx, []model.Input{{Seq: seq, Tokens: []int{i % 600}}}, model.Range{}, nil); err != nil {
					b.Fatal(err)
				}
				if seq.Len() > 3000 {
					seq.Truncate(128)
				}
			}
		})
	}
}
