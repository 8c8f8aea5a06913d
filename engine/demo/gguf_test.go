package demo

import (
	"path/filepath"
	"slices"
	"testing"

	"fusion/engine/gguf"
	"fusion/engine/tensor"
	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

// TestGGUFDemo writes GGUF demos and reads them back: metadata, tensor
// types per the layout, weights within the type's error, and the embedded
// tokenizer encoding exactly like the tokenizer.json it came from.
func TestGGUFDemo(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		vocabFrom string
		wantTypes map[string]tensor.DType
		maxErr    float64 // max abs error relative to the tensor's max abs value
	}{
		{"qwen3 bf16", Options{Arch: "qwen3", DType: "bf16"}, "",
			map[string]tensor.DType{"blk.0.attn_q.weight": tensor.BF16, "blk.0.attn_norm.weight": tensor.F32}, 0},
		{"qwen3 q8_0", Options{Arch: "qwen3", Quantize: 8}, "",
			map[string]tensor.DType{"blk.1.ffn_down.weight": tensor.Q8_0, "token_embd.weight": tensor.Q8_0}, 0.01},
		{"llama q4_k_m", Options{Arch: "llama", Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Quantize: 4, Untied: true}, "",
			map[string]tensor.DType{"blk.0.attn_q.weight": tensor.Q4_K, "blk.0.attn_v.weight": tensor.Q6_K, "output.weight": tensor.Q6_K,
				"blk.0.ffn_down.weight": tensor.Q6_K}, 0.15},
		// The K-quant mixes: every type in every layer.
		{"llama q5_k_m", Options{Arch: "llama", Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, GGUFType: "q5_k_m", Untied: true}, "",
			map[string]tensor.DType{"blk.0.attn_q.weight": tensor.Q5_K, "blk.1.attn_v.weight": tensor.Q6_K, "output.weight": tensor.Q6_K,
				"blk.1.ffn_down.weight": tensor.Q6_K, "blk.1.attn_output.weight": tensor.Q5_K}, 0.08},
		{"qwen3 q3_k_m", Options{Arch: "qwen3", Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, GGUFType: "q3_k_m"}, "",
			map[string]tensor.DType{"blk.0.attn_q.weight": tensor.Q3_K, "blk.1.attn_v.weight": tensor.Q5_K, "token_embd.weight": tensor.Q3_K,
				"blk.1.ffn_down.weight": tensor.Q4_K, "blk.1.attn_output.weight": tensor.Q4_K, "blk.0.ffn_up.weight": tensor.Q3_K}, 0.3},
		{"qwen3 q2_k", Options{Arch: "qwen3", Hidden: 256, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, GGUFType: "q2_k"}, "",
			map[string]tensor.DType{"blk.0.attn_q.weight": tensor.Q2_K, "blk.1.attn_v.weight": tensor.Q3_K, "token_embd.weight": tensor.Q2_K,
				"blk.1.ffn_down.weight": tensor.Q3_K, "blk.1.attn_output.weight": tensor.Q3_K}, 0.6},
		{"qwen3 real vocab", Options{Arch: "qwen3"}, "qwen3",
			map[string]tensor.DType{"blk.0.attn_k.weight": tensor.BF16}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Format = FormatGGUF
			if tc.vocabFrom != "" {
				o.VocabFrom = testenv.TokenizerDir(t, tc.vocabFrom)
			}
			out := filepath.Join(t.TempDir(), "m")
			m, err := Create(out, o)
			if err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(GGUFPath(out), gguf.LoadRead)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg, err := f.ModelConfig()
			if err != nil {
				t.Fatal(err)
			}
			p := m.Params
			if cfg.ModelType != p.Arch || cfg.HiddenSize != p.Hidden || cfg.NumHiddenLayers != p.Layers ||
				cfg.NumKeyValueHeads != p.KVHeads || cfg.HeadDim != p.HeadDim || cfg.VocabSize != p.Vocab ||
				cfg.TieWordEmbeddings != p.TieEmbeddings {
				t.Fatalf("config %+v does not match params %+v", cfg, p)
			}
			for name, want := range tc.wantTypes {
				got, ok := f.Tensor(name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				if got.DType != want {
					t.Errorf("%s: type %v, want %v", name, got.DType, want)
				}
			}
			if len(f.Tensors) != len(m.Tensors) {
				t.Errorf("%d tensors in file, %d in model", len(f.Tensors), len(m.Tensors))
			}
			for _, src := range m.Tensors {
				name, _ := gguf.GGUFName(src.Name)
				got, ok := f.Tensor(name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				if heads := qkHeads(p, src.Name); heads > 0 && gguf.NeedsQKPermute(p.Arch) {
					if got, err = gguf.UnpermuteQK(got, heads); err != nil {
						t.Fatal(err)
					}
				}
				vals, err := gguf.ToFloat32(got)
				if err != nil {
					t.Fatal(err)
				}
				var maxAbs, maxDiff float64
				for i, v := range src.Data {
					maxAbs = max(maxAbs, abs64(float64(v)))
					maxDiff = max(maxDiff, abs64(float64(v)-float64(vals[i])))
				}
				if maxDiff > tc.maxErr*maxAbs {
					t.Errorf("%s (%v): max error %g, over %g of max |w| %g", name, got.DType, maxDiff, tc.maxErr, maxAbs)
				}
			}

			// The embedded tokenizer encodes like the one it was made from.
			doc, err := f.TokenizerJSON()
			if err != nil {
				t.Fatal(err)
			}
			fromGGUF, err := tokenizer.FromJSON(doc)
			if err != nil {
				t.Fatal(err)
			}
			orig, err := tokenizer.FromJSON(m.Tokenizer.Files["tokenizer.json"])
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"Hello, world! 12345", "<|im_start|>user\nhi<|im_end|>", "  code:\tx := []int{1, 2}\n", "日本語 ünïcödé 🙂"} {
				a, b := orig.Encode(s, false), fromGGUF.Encode(s, false)
				if !slices.Equal(a, b) {
					t.Errorf("encode %q: tokenizer.json %v, GGUF %v", s, a, b)
				}
			}
			if f.ChatTemplate() != m.Tokenizer.ChatTemplate {
				t.Error("chat template not preserved")
			}
		})
	}
}

func abs64(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
