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
	rewrite := func(name string, meta func(gguf.KV) gguf.KV, tens func(gguf.WriteTensor) gguf.WriteTensor) {
		t.Helper()
		rewriteGGUF(t, files[0], filepath.Join(r.cfg.ModelsDir, name+".gguf"), meta, tens)
	}
	same := func(kv gguf.KV) gguf.KV { return kv }
	rewrite("mamba", func(kv gguf.KV) gguf.KV {
		if kv.Key == "general.architecture" {
			kv.Value = gguf.String("mamba")
		}
		return kv
	}, func(w gguf.WriteTensor) gguf.WriteTensor { return w })
	// A real Q4_K_M file's Q5_K attn_output runs; a Q4_1 matrix does not.
	retype := func(dt tensor.DType) func(gguf.WriteTensor) gguf.WriteTensor {
		return func(w gguf.WriteTensor) gguf.WriteTensor {
			if strings.HasSuffix(w.Name, "attn_output.weight") {
				n, _ := tensor.NumElements(w.Shape)
				size, err := dt.ByteSize(n)
				if err != nil {
					t.Fatal(err)
				}
				w.DType, w.Data = dt, make([]byte, size)
			}
			return w
		}
	}
	rewrite("q5k", same, retype(tensor.Q5_K))
	rewrite("q41", same, retype(tensor.Q4_1))

	got := map[string]ModelDetails{}
	for _, d := range r.Details() {
		got[d.ID] = d
	}
	for _, id := range []string{"g", "q5k"} {
		if g := got[id]; !g.Compatible || g.Format != "gguf" || g.Architecture != "qwen3" || g.ContextLength <= 0 || g.Bytes <= 0 {
			t.Errorf("%s: %+v", id, g)
		}
	}
	for id, want := range map[string]string{"mamba": "mamba", "q41": "Q4_1"} {
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

// rewriteGGUF writes to dst the GGUF file src with each metadata entry
// passed through meta and each tensor through tens.
func rewriteGGUF(t *testing.T, src, dst string, meta func(gguf.KV) gguf.KV, tens func(gguf.WriteTensor) gguf.WriteTensor) {
	t.Helper()
	f, err := gguf.Open(src, gguf.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kvs []gguf.KV
	for _, kv := range f.KV {
		kvs = append(kvs, meta(kv))
	}
	var ts []gguf.WriteTensor
	for _, x := range f.Tensors {
		ts = append(ts, tens(gguf.WriteTensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: x.Data}))
	}
	if err := gguf.WriteFile(dst, kvs, ts); err != nil {
		t.Fatal(err)
	}
}
