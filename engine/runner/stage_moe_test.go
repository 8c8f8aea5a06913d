package runner

import (
	"context"
	"path/filepath"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/backend/cpu/kernels"
	"fusion/engine/demo"
	"fusion/engine/model"
)

// TestStageCostsMoE: a mixture's stages are sized by the tensors they
// load. For a qwen3moe GGUF (its blk.N.* experts, token_embd, output) and
// a DeepSeek-V3 demo (a dense first layer, then routed and shared
// experts), what the runner counts for the weights of every layer range
// a two-stage split can give (stageWeights, what LoadStage and the
// pipeline's first stage reserve) is what loading that range holds, and
// StageCosts adds one sequence's KV at the context to each layer's. A
// GGUF model has its layers counted (it could not be sharded before).
func TestStageCostsMoE(t *testing.T) {
	dir := t.TempDir()
	o := demo.Options{Arch: "qwen3_moe", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, Intermediate: 256,
		Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 128, Seed: 31, Format: demo.FormatGGUF, GGUFType: "q8_0"}
	if _, err := demo.Create(filepath.Join(dir, "moe"), o); err != nil {
		t.Fatal(err)
	}
	o = demo.Options{Arch: "deepseek_v3", Layers: 3, Hidden: 128, Heads: 4, KVHeads: 4, Intermediate: 256, Seed: 32}
	if _, err := demo.Create(filepath.Join(dir, "ds"), o); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Loaded on the generic kernels: the AVX-512 ones pad an F32 matrix's
	// rows to panels of 16 (this mixture's 4-expert routers: ~2% of its
	// bytes), which the files cannot tell; LoadStage then counts what the
	// stage holds (TestPipelineGGUFMoE).
	generic, err := kernels.ForLevel(kernels.LevelGeneric)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Kernels: generic})
	defer be.Close()
	for _, tc := range []struct {
		name   string
		layers int
	}{{"moe", 4}, {"ds", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			if n := r.NumLayers(tc.name); n != tc.layers {
				t.Fatalf("NumLayers = %d, want %d", n, tc.layers)
			}
			sc, ok := r.StageCosts(tc.name)
			if !ok || len(sc.Bytes) != tc.layers || len(sc.Compute) != tc.layers || sc.Head <= 0 {
				t.Fatalf("StageCosts = %+v, %v", sc, ok)
			}
			e, err := r.entry(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			c, _ := r.chatConfig(tc.name)
			ctxLen := r.contextOf(tc.name, c)
			for k := 1; k < tc.layers; k++ {
				for _, rg := range []model.Range{{Start: 0, End: k}, {Start: k, End: tc.layers}} {
					m, err := model.Load(context.Background(), e.info.Path, be, model.Options{Layers: rg, Mmap: true})
					if err != nil {
						t.Fatal(err)
					}
					held, counted := m.WeightBytes(), r.stageWeights(tc.name, rg, 0)
					m.Close()
					// The CPU backend holds norm vectors as float32
					// (bf16 in the file): a few hundred bytes a layer.
					if d := float64(counted-held) / float64(held); d < -0.01 || d > 0.01 {
						t.Errorf("layers %v: %d bytes counted, loading them holds %d (%.2f%% off)", rg, counted, held, 100*d)
					}
					var kv int64
					for l := rg.Start; l < rg.End; l++ {
						kv += sc.Bytes[l]
					}
					kv -= r.stageWeights(tc.name, rg, 0)
					if rg.Start == 0 {
						kv += sc.First
					} else {
						kv += sc.Last
					}
					var want int64
					for l := rg.Start; l < rg.End; l++ {
						want += layerState(c, l, ctxLen)
					}
					if kv != want || want <= 0 {
						t.Errorf("layers %v: StageCosts has %d bytes beyond the weights, want one sequence's KV %d", rg, kv, want)
					}
				}
			}
		})
	}
}

// TestPipelineGGUFMoE: a qwen3moe GGUF runs as a pipeline of two stages
// (layers [0, 2) here, [2, 4) downstream), each loading its blk.N.*
// tensors only, with the tokens and log-probs of the whole file, greedy
// and sampled, several requests at once.
func TestPipelineGGUFMoE(t *testing.T) {
	dir := t.TempDir()
	o := demo.Options{Arch: "qwen3_moe", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, Intermediate: 256,
		Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 128, Seed: 33, Format: demo.FormatGGUF, GGUFType: "q8_0"}
	if _, err := demo.Create(filepath.Join(dir, "moe"), o); err != nil {
		t.Fatal(err)
	}
	whole, first, sm := stageRunners(t, dir, "moe", model.Range{Start: 2, End: 4})
	whole.mu.Lock()
	counted := whole.stageBytes
	whole.mu.Unlock()
	if counted != sm.WeightBytes() {
		t.Errorf("the later stage counts %d bytes against the budget, its weights hold %d", counted, sm.WeightBytes())
	}
	down := &localDown{sm: sm, seqs: map[uint64]*model.Sequence{}}
	if err := first.SetPipeline(context.Background(), "moe", &Pipeline{Layers: model.Range{Start: 0, End: 2}, Generation: 1, Down: down}); err != nil {
		t.Fatal(err)
	}
	samePipelineRuns(t, first, whole, "moe", 8, "experts", "in two stages")
	if n := down.held(); n != 0 {
		t.Errorf("%d sequences still held downstream", n)
	}
}
