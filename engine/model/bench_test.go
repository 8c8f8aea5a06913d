package model

import (
	"context"
	"os"
	"testing"

	"fusion/engine/backend/cpu"
)

// Benchmarks on a model given by $FUSION_BENCH_MODEL (a directory or a
// .gguf file, e.g. one `fusion bench engine` created under .cache/bench),
// for profiling:
//
//	FUSION_BENCH_MODEL=.cache/bench/qwen3-0.6b-shape-bf16 \
//	  go test -run - -bench Decode -cpuprofile cpu.prof ./engine/model
func benchModel(b *testing.B) (*Model, *cpu.Backend) {
	path := os.Getenv("FUSION_BENCH_MODEL")
	if path == "" {
		b.Skip("set FUSION_BENCH_MODEL to a model path")
	}
	be := cpu.New(cpu.Options{})
	b.Cleanup(func() { be.Close() })
	m, err := Load(context.Background(), path, be, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m, be
}

func BenchmarkDecode(b *testing.B) {
	m, _ := benchModel(b)
	ctx := context.Background()
	seq, err := m.NewSequence(4096)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Forward(ctx, []Input{{Seq: seq, Tokens: tokens(1, 256)}}, Range{}, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if seq.Len() >= 4000 {
			seq.Truncate(256)
		}
		if _, err := m.Forward(ctx, []Input{{Seq: seq, Tokens: []int{i % 600}}}, Range{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrefill512(b *testing.B) {
	m, _ := benchModel(b)
	ctx := context.Background()
	seq, err := m.NewSequence(512)
	if err != nil {
		b.Fatal(err)
	}
	prompt := tokens(2, 512)
	b.ResetTimer()
	for range b.N {
		seq.Truncate(0)
		if _, err := m.Forward(ctx, []Input{{Seq: seq, Tokens: prompt}}, Range{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tok/s")
}
