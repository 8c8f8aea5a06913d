package bench

import (
	"context"
	"path/filepath"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/race"
	"fusion/internal/testenv"
)

// TestLlamaBenchSmoke runs the real llama-bench (scripts/llamacpp.sh's
// build) the way the engine benchmark does, on the GGUF layouts of the
// benchmark written for a tiny Qwen3 shape with the real tokenizer:
// llama.cpp loads them and the prefill, decode-at-depth and
// empty-context decode rows the benchmark reads are all there.
func TestLlamaBenchSmoke(t *testing.T) {
	if race.Enabled {
		t.Skip("slow under -race (a 151,936-token vocabulary, llama.cpp beside it); make test runs it without -race")
	}
	dir := testenv.LlamaCpp(t)
	vocab := testenv.TokenizerDir(t, "qwen3")
	shape := demo.Options{Arch: "qwen3", Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64,
		Intermediate: 512, VocabFrom: vocab, Seed: 1}
	cache := t.TempDir()
	for _, f := range engineFormats(shape) {
		if f.opts.Format != demo.FormatGGUF {
			continue
		}
		path, err := benchModelAt(filepath.Join(cache, f.name), f)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		s, err := llamaBench(context.Background(), filepath.Join(dir, "lib", "llama-bench"), path, 16, 4, 1)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if s.Prefill <= 0 || s.Decode <= 0 || s.DecodeEmpty <= 0 {
			t.Errorf("%s: %+v", f.name, s)
		}
		t.Logf("%s: llama-bench %+v tok/s (tiny model, 1 thread; not a benchmark)", f.name, *s)
	}
}
