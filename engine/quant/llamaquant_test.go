package quant

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/model"
	"fusion/internal/testenv"
)

// TestGGUFTensorTypeMatchesLlamaQuantize: llama.cpp's own quantizer
// (llama_model_quantize, the code behind llama-quantize, in the build of
// scripts/llamacpp.sh) turns F32 demo GGUFs into every type oQ writes,
// and GGUFTensorType picks the type llama.cpp picked for every tensor of
// every file: a 16-layer dense model with 4 heads per KV head (the
// use_more_bits layers, Q3_K_M's first sixteenth, Q2_K's attn_v for GQA
// ≥ 4), a 4-layer one with 2 (Q2_K's attn_v below that), and a mixture of
// exactly 8 experts (Mixtral's attn_v/attn_k/attn_output rules, stacked
// ffn_down_exps by the layer in their names). fusion's model list judges
// every one of llama.cpp's files loadable. Small vocabularies and widths
// keep it to seconds.
func TestGGUFTensorTypeMatchesLlamaQuantize(t *testing.T) {
	py := testenv.Python(t)
	lc := testenv.LlamaCpp(t)
	models := []struct {
		name string
		o    demo.Options
	}{
		{"dense16", demo.Options{Arch: "qwen3", Layers: 16, Hidden: 256, Heads: 4, KVHeads: 1, HeadDim: 64, Intermediate: 256}},
		{"gqa2", demo.Options{Arch: "llama", Layers: 4, Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Untied: true}},
		{"moe8", demo.Options{Arch: "qwen3_moe", Layers: 4, Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 256,
			Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 256}},
	}
	type job struct {
		In    string `json:"in"`
		Out   string `json:"out"`
		FType uint32 `json:"ftype"`
		model int
		typ   string
	}
	var jobs []job
	dir := t.TempDir()
	for i, m := range models {
		o := m.o
		o.Format, o.GGUFType, o.Seed = demo.FormatGGUF, "f32", 5
		if _, err := demo.Create(filepath.Join(dir, m.name), o); err != nil {
			t.Fatal(err)
		}
		for _, typ := range GGUFTypes {
			jobs = append(jobs, job{In: demo.GGUFPath(filepath.Join(dir, m.name)), Out: filepath.Join(dir, m.name+"-"+typ+".gguf"),
				FType: ggufFileType[typ], model: i, typ: typ})
		}
	}
	out, stderr := runLlamaCppScript(t, py, lc, "llamacpp_quantize.py", map[string]any{"jobs": jobs})
	if strings.Count(string(out), "ok ") != len(jobs) {
		t.Fatalf("llama.cpp quantize: %d of %d files\n%s\n%s", strings.Count(string(out), "ok "), len(jobs), out, stderr)
	}
	for _, j := range jobs {
		m := models[j.model].o
		f, err := gguf.Open(j.Out, gguf.LoadMmap)
		if err != nil {
			t.Fatal(err)
		}
		_, hasOutput := f.Tensor("output.weight")
		gm := GGUFModel{Layers: m.Layers, Tied: !hasOutput, GQA: m.Heads / m.KVHeads, Experts: m.Experts}
		counts := map[string]int{}
		for _, x := range f.Tensors {
			counts[x.DType.String()]++
			if want := GGUFTensorType(j.typ, x.Name, x.Shape, gm); x.DType != want {
				t.Errorf("%s %s: %s %v is %v in llama.cpp's file, GGUFTensorType says %v", models[j.model].name, j.typ, x.Name, x.Shape, x.DType, want)
			}
		}
		t.Logf("%s %s: %d tensors %v", models[j.model].name, j.typ, len(f.Tensors), fmt.Sprint(counts))
		f.Close()
		if _, err := model.InspectGGUF(j.Out); err != nil {
			t.Errorf("%s %s: llama.cpp's file is not loadable: %v", models[j.model].name, j.typ, err)
		}
	}
}
