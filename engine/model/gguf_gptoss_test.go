package model

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
)

// gptOssGGUF writes one tiny gpt_oss demo twice, from the same float
// weights: as a GGUF (F32 but for the experts, MXFP4 as llama.cpp's
// converter stores them) and as F32 safetensors whose experts hold the
// values those MXFP4 blocks decode to (MLX's mxfp4 rounding, the codes
// the GGUF repacks). It returns the GGUF file and the safetensors
// directory.
func gptOssGGUF(t *testing.T) (gg, st string) {
	t.Helper()
	o := demo.Options{Arch: "gpt_oss", Layers: 2, Hidden: 64, Heads: 2, KVHeads: 1, HeadDim: 32, Experts: 4, ExpertsPerTok: 2,
		MoEIntermediate: 64, SlidingWindow: 8, DType: "f32", Format: demo.FormatGGUF, GGUFType: "f32", Seed: 5}
	m, err := demo.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := demo.Write(filepath.Join(dir, "gg"), m); err != nil {
		t.Fatal(err)
	}
	m.Options.Format, m.Options.GGUFType = demo.FormatSafetensors, ""
	for i, x := range m.Tensors {
		if !strings.Contains(x.Name, ".mlp.experts.") || !strings.HasSuffix(x.Name, "_proj.weight") {
			continue
		}
		cols := int(x.Shape[len(x.Shape)-1])
		codes, scales, err := modelfile.QuantizeFP(modelfile.ModeMXFP4, m.DType, x.Data, len(x.Data)/cols, cols)
		if err != nil {
			t.Fatal(err)
		}
		if m.Tensors[i].Data, err = modelfile.DequantizeFP(modelfile.ModeMXFP4, codes, scales, len(x.Data)/cols, cols); err != nil {
			t.Fatal(err)
		}
	}
	st = filepath.Join(dir, "st")
	if err := demo.Write(st, m); err != nil {
		t.Fatal(err)
	}
	return demo.GGUFPath(filepath.Join(dir, "gg")), st
}

// TestGGUFGptOss: a gpt-oss GGUF in llama.cpp's layout (MXFP4 experts
// with their biases, attention sinks, the biased router, sliding and full
// layers, yarn) loads to the config of the same model's config.json and
// gives its logits within 1e-4 (relative) over a prompt longer than the
// window and single decode steps; the models list finds it compatible.
func TestGGUFGptOss(t *testing.T) {
	gg, st := gptOssGGUF(t)
	be := cpu.New(cpu.Options{})
	defer be.Close()
	a, b := load(t, be, st, Range{}), load(t, be, gg, Range{})
	ca, cb := a.Config, b.Config
	if cb.Architecture != modelfile.ArchGptOss || cb.SlidingWindow != ca.SlidingWindow || !slices.Equal(cb.Sliding, ca.Sliding) ||
		!reflect.DeepEqual(cb.MoE, ca.MoE) || *cb.GptOss != *ca.GptOss || !reflect.DeepEqual(cb.RopeScaling, ca.RopeScaling) ||
		cb.HeadDim != ca.HeadDim || cb.RopeTheta != ca.RopeTheta {
		t.Errorf("GGUF config %+v (moe %+v, rope %+v)\nsafetensors %+v (moe %+v, rope %+v)", cb, cb.MoE, cb.RopeScaling, ca, ca.MoE, ca.RopeScaling)
	}
	sa, sb := newSeq(t, a), newSeq(t, b)
	var worst float64
	for i, in := range [][]int{tokens(10, 20), {3}, {400}, {77}} {
		la := forward(t, a, []Input{{Seq: sa, Tokens: in, AllLogits: true}}, Range{}, nil).Logits[0]
		lb := forward(t, b, []Input{{Seq: sb, Tokens: in, AllLogits: true}}, Range{}, nil).Logits[0]
		var d float64
		for j := range la {
			d = max(d, math.Abs(float64(la[j]-lb[j]))/max(1, math.Abs(float64(la[j]))))
		}
		worst = max(worst, d)
		if d > 1e-4 {
			t.Errorf("step %d: logits differ by %.2e (relative)", i, d)
		}
	}
	t.Logf("max relative logit difference GGUF vs safetensors: %.2e", worst)

	cfg, err := InspectGGUF(gg)
	if err != nil {
		t.Fatalf("the models list refuses the file: %v", err)
	}
	if cfg.Architecture != modelfile.ArchGptOss {
		t.Errorf("listed as %q", cfg.Architecture)
	}
}

// TestGGUFGptOssLoadErrors: a gpt-oss GGUF whose metadata or tensors do
// not hold together fails to load with the error a caller branches on (no
// panic), and llama.cpp's sliding_window_pattern, as a period or a bool
// per layer, decides which layers slide.
func TestGGUFGptOssLoadErrors(t *testing.T) {
	gg, _ := gptOssGGUF(t)
	be := cpu.New(cpu.Options{})
	defer be.Close()
	type edit = func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
	tensorEdit := func(name string, f func(*gguf.WriteTensor)) edit {
		return func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == name {
					f(&ts[i])
				}
			}
			return meta, ts
		}
	}
	dropMeta := func(key string) edit {
		return func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return slices.DeleteFunc(meta, func(kv gguf.KV) bool { return kv.Key == key }), ts
		}
	}
	addMeta := func(key string, v gguf.Value) edit {
		return func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return append(meta, gguf.KV{Key: key, Value: v}), ts
		}
	}
	for _, tc := range []struct {
		name string
		edit edit
		want error
	}{
		{"sinks missing", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return meta, slices.DeleteFunc(ts, func(x gguf.WriteTensor) bool { return x.Name == "blk.1.attn_sinks.weight" })
		}, ErrBadWeights},
		{"router bias missing", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return meta, slices.DeleteFunc(ts, func(x gguf.WriteTensor) bool { return x.Name == "blk.0.ffn_gate_inp.bias" })
		}, ErrBadWeights},
		{"expert biases of the wrong shape", tensorEdit("blk.0.ffn_up_exps.bias", func(w *gguf.WriteTensor) {
			w.Shape = []int64{w.Shape[0] * w.Shape[1]}
		}), ErrBadWeights},
		{"an MXFP4 scale of 255", tensorEdit("blk.1.ffn_down_exps.weight", func(w *gguf.WriteTensor) {
			w.Data[17*5] = 0xff
		}), ErrBadWeights},
		{"no sliding window", dropMeta("gpt-oss.attention.sliding_window"), modelfile.ErrInvalidConfig},
		{"no experts", dropMeta("gpt-oss.expert_count"), modelfile.ErrInvalidConfig},
		{"a pattern of the wrong length", addMeta("gpt-oss.attention.sliding_window_pattern", gguf.Array([]bool{true})), modelfile.ErrInvalidConfig},
		{"a pattern without full layers", addMeta("gpt-oss.attention.sliding_window_pattern", gguf.Uint32(0)), modelfile.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(context.Background(), rewriteGGUF(t, gg, tc.edit), be, Options{})
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		pattern gguf.Value
		sliding []bool
	}{
		{"absent: the even layers", gguf.Value{}, []bool{true, false}},
		{"a period of 2", gguf.Uint32(2), []bool{true, false}},
		{"a bool per layer", gguf.Array([]bool{false, true}), []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := gg
			if tc.pattern.Valid() {
				path = rewriteGGUF(t, gg, addMeta("gpt-oss.attention.sliding_window_pattern", tc.pattern))
			}
			if m := load(t, be, path, Range{}); !slices.Equal(m.Config.Sliding, tc.sliding) {
				t.Errorf("sliding layers %v, want %v", m.Config.Sliding, tc.sliding)
			}
		})
	}
}
