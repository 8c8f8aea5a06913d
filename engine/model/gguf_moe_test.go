package model

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/backend/cpu"
	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/tensor"
)

// rewriteGGUF writes a copy of the GGUF file at src with its metadata and
// tensors passed through edit, and returns the copy's path.
func rewriteGGUF(t *testing.T, src string, edit func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) string {
	t.Helper()
	f, err := gguf.Open(src, gguf.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ts := make([]gguf.WriteTensor, len(f.Tensors))
	for i, x := range f.Tensors {
		ts[i] = gguf.WriteTensor{Name: x.Name, DType: x.DType, Shape: slices.Clone(x.Shape), Data: slices.Clone(x.Data)}
	}
	var meta []gguf.KV
	for _, kv := range f.KV {
		if kv.Key != gguf.KeyAlignment {
			meta = append(meta, kv)
		}
	}
	meta, ts = edit(meta, ts)
	out := filepath.Join(t.TempDir(), "edited.gguf")
	if err := gguf.WriteFile(out, meta, ts); err != nil {
		t.Fatal(err)
	}
	return out
}

// setMeta replaces the value of key in meta.
func setMeta(meta []gguf.KV, key string, v gguf.Value) []gguf.KV {
	for i := range meta {
		if meta[i].Key == key {
			meta[i].Value = v
		}
	}
	return meta
}

// TestGGUFMoELoadErrors: a qwen3moe GGUF whose experts do not match its
// metadata, or are in a type the backends do not run, fails to load with
// the error a caller branches on (no panic); a layer without a router
// loads as one of mlp_only_layers with a dense MLP.
func TestGGUFMoELoadErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	src := smallMoE(t, demo.Options{Format: demo.FormatGGUF, GGUFType: "f32", Experts: 4, ExpertsPerTok: 2})
	retype := func(name string, dt tensor.DType) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i, x := range ts {
				if x.Name == name {
					v, err := tensor.Floats(tensor.Tensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: x.Data})
					if err != nil {
						t.Fatal(err)
					}
					if ts[i], err = gguf.QuantizeTensor(name, dt, x.Shape, v); err != nil {
						t.Fatal(err)
					}
				}
			}
			return meta, ts
		}
	}
	for _, tc := range []struct {
		name string
		edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
		want error
	}{
		{"expert count disagrees", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return setMeta(meta, "qwen3moe.expert_count", gguf.Uint32(3)), ts
		}, ErrBadWeights},
		{"more used than there are", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return setMeta(meta, "qwen3moe.expert_used_count", gguf.Uint32(5)), ts
		}, modelfile.ErrInvalidConfig},
		{"expert width disagrees", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return setMeta(meta, "qwen3moe.expert_feed_forward_length", gguf.Uint32(128)), ts
		}, ErrBadWeights},
		{"experts not stacked", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == "blk.1.ffn_up_exps.weight" {
					ts[i].Shape = []int64{ts[i].Shape[0] * ts[i].Shape[1], ts[i].Shape[2]}
				}
			}
			return meta, ts
		}, ErrBadWeights},
		{"experts in Q4_1", retype("blk.0.ffn_gate_exps.weight", tensor.Q4_1), ErrBadWeights},
		{"rope scaling under qwen3moe's keys", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return append(meta, gguf.KV{Key: "qwen3moe.rope.scaling.type", Value: gguf.String("dynamic")}), ts
		}, modelfile.ErrUnsupported},
		{"router missing, no dense MLP", func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return meta, slices.DeleteFunc(ts, func(x gguf.WriteTensor) bool { return x.Name == "blk.0.ffn_gate_inp.weight" })
		}, ErrBadWeights},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(context.Background(), rewriteGGUF(t, src, tc.edit), be, Options{})
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}

	t.Run("yarn", func(t *testing.T) {
		path := rewriteGGUF(t, src, func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return append(meta, gguf.KV{Key: "qwen3moe.rope.scaling.type", Value: gguf.String("yarn")},
				gguf.KV{Key: "qwen3moe.rope.scaling.factor", Value: gguf.Float32(4)},
				gguf.KV{Key: "qwen3moe.rope.scaling.original_context_length", Value: gguf.Uint32(32768)}), ts
		})
		m := load(t, be, path, Range{})
		if r := m.Config.RopeScaling; r == nil || r.Type != "yarn" || r.Factor != 4 || r.OriginalMaxPositionEmbeddings != 32768 {
			t.Errorf("rope scaling %+v, want yarn ×4 from 32768", r)
		}
	})

	t.Run("dense layer", func(t *testing.T) {
		path := rewriteGGUF(t, src, func(meta []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			ts = slices.DeleteFunc(ts, func(x gguf.WriteTensor) bool {
				return strings.HasPrefix(x.Name, "blk.1.ffn_") && x.Name != "blk.1.ffn_norm.weight"
			})
			for _, n := range []string{"ffn_gate", "ffn_up", "ffn_down"} {
				v := make([]float32, 256*256)
				for i := range v {
					v[i] = float32(i%7-3) / 64
				}
				w, err := gguf.QuantizeTensor("blk.1."+n+".weight", tensor.F32, []int64{256, 256}, v)
				if err != nil {
					t.Fatal(err)
				}
				ts = append(ts, w)
			}
			return meta, ts
		})
		m := load(t, be, path, Range{})
		if moe := m.Config.MoE; moe == nil || !slices.Equal(moe.MLPOnlyLayers, []int{1}) || !moe.Sparse(0) || moe.Sparse(1) || !moe.NormTopK {
			t.Fatalf("MoE config %+v, want layer 1 dense and norm_topk_prob", moe)
		}
		logits := forward(t, m, []Input{{Seq: newSeq(t, m), Tokens: tokens(4, 20)}}, Range{}, nil).Logits[0]
		if len(logits) != m.Config.VocabSize {
			t.Errorf("%d logits, want %d", len(logits), m.Config.VocabSize)
		}
	})
}
