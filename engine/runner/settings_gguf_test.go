package runner

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/tensor"
)

// TestDetailsGGUF: a GGUF file is listed with the config its metadata
// gives, and one this engine cannot load is listed incompatible with the
// reason — an architecture it lacks, a tensor type the backends do not
// run — without loading it, and a load of it fails with the same reason.
func TestDetailsGGUF(t *testing.T) {
	r := newRunnerWith(t, Config{}, map[string]demo.Options{
		"g": {Arch: "qwen3", Seed: 7, Format: demo.FormatGGUF, GGUFType: "q8_0", Hidden: 256, Intermediate: 256, Layers: 1}})
	files, err := filepath.Glob(filepath.Join(r.cfg.ModelsDir, "g*.gguf"))
	if err != nil || len(files) != 1 {
		t.Fatalf("the demo GGUF: %v %v", files, err)
	}
	f, err := gguf.Open(files[0], gguf.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rewrite := func(name string, meta func(gguf.KV) gguf.KV, tens func(gguf.WriteTensor) gguf.WriteTensor) {
		t.Helper()
		var kvs []gguf.KV
		for _, kv := range f.KV {
			kvs = append(kvs, meta(kv))
		}
		var ts []gguf.WriteTensor
		for _, x := range f.Tensors {
			ts = append(ts, tens(gguf.WriteTensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: x.Data}))
		}
		if err := gguf.WriteFile(filepath.Join(r.cfg.ModelsDir, name+".gguf"), kvs, ts); err != nil {
			t.Fatal(err)
		}
	}
	same := func(kv gguf.KV) gguf.KV { return kv }
	rewrite("mamba", func(kv gguf.KV) gguf.KV {
		if kv.Key == "general.architecture" {
			kv.Value = gguf.String("mamba")
		}
		return kv
	}, func(w gguf.WriteTensor) gguf.WriteTensor { return w })
	rewrite("q5k", same, func(w gguf.WriteTensor) gguf.WriteTensor {
		if strings.HasSuffix(w.Name, "attn_output.weight") {
			n, _ := tensor.NumElements(w.Shape)
			size, err := tensor.Q5_K.ByteSize(n)
			if err != nil {
				t.Fatal(err)
			}
			w.DType, w.Data = tensor.Q5_K, make([]byte, size)
		}
		return w
	})

	got := map[string]ModelDetails{}
	for _, d := range r.Details() {
		got[d.ID] = d
	}
	if g := got["g"]; !g.Compatible || g.Format != "gguf" || g.Architecture != "qwen3" || g.ContextLength <= 0 || g.Bytes <= 0 {
		t.Errorf("g: %+v", g)
	}
	for id, want := range map[string]string{"mamba": "mamba", "q5k": "Q5_K"} {
		d, ok := got[id]
		if !ok || d.Compatible || !strings.Contains(d.Reason, want) {
			t.Errorf("%s: %+v, want incompatible naming %q", id, d, want)
			continue
		}
		if res := generate(context.Background(), r, chat(id, "Hello", 2)); res.err == nil || !strings.Contains(res.err.Error(), want) {
			t.Errorf("%s: loading it: %v, want an error naming %q", id, res.err, want)
		}
	}
}
