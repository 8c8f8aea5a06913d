package quant

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/gguf"
	"fusion/engine/tensor"
)

// TestGGUFExportMoE: a bf16 qwen3_moe source (experts stacked as mlx-lm
// stores them) exported as Q4_K_M is llama.cpp's qwen3moe: expert_* keys,
// the router in F32, ffn_gate/up_exps Q4_K and ffn_down_exps Q6_K only in
// the layers use_more_bits picks (of 2 layers: the last), every tensor
// within the K-quants' error of the source, and fusion loads it at a
// perplexity near the source's. A mixture llama.cpp's qwen3moe cannot
// express (a dense layer) is refused, and so is an MLX export of a
// mixture.
func TestGGUFExportMoE(t *testing.T) {
	o := demo.Options{Arch: "qwen3_moe", Layers: 2, Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 256,
		Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 256, Seed: 8}
	src := demoDir(t, o)
	res, err := Quantize(context.Background(), src, filepath.Join(t.TempDir(), "out"), Options{Format: FormatGGUF, GGUFType: GGUFQ4_K_M})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(res.Dir, gguf.LoadMmap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a := f.Architecture(); a != "qwen3moe" {
		t.Errorf("architecture %q, want qwen3moe", a)
	}
	mc, err := f.ModelConfig()
	if err != nil {
		t.Fatal(err)
	}
	if mc.ModelType != "qwen3_moe" || mc.Experts != 4 || mc.ExpertsUsed != 2 || mc.ExpertIntermediate != 256 {
		t.Errorf("config %+v", mc)
	}
	for name, want := range map[string]tensor.DType{
		"blk.0.ffn_gate_inp.weight": tensor.F32, "blk.1.ffn_gate_inp.weight": tensor.F32,
		"blk.0.ffn_gate_exps.weight": tensor.Q4_K, "blk.1.ffn_up_exps.weight": tensor.Q4_K,
		"blk.0.ffn_down_exps.weight": tensor.Q4_K, "blk.1.ffn_down_exps.weight": tensor.Q6_K,
		"blk.1.attn_v.weight": tensor.Q6_K, "token_embd.weight": tensor.Q6_K, // tied: it serves as the output
	} {
		if got, ok := f.Tensor(name); !ok || got.DType != want {
			t.Errorf("%s is %v (present %v), want %v", name, got.DType, ok, want)
		}
	}
	checkRoundTrip(t, "qwen3_moe q4_k_m", src, f, 0.15)

	text := EvalText[:strings.Index(EvalText, ".")+1]
	perplexityDelta(t, fmt.Sprintf("%d tensors %v, %.3f bits/weight", res.Tensors, res.TensorTypes, res.BitsPerWeight), src, res.Dir, text, 0.4)

	if _, err := Quantize(context.Background(), src, filepath.Join(t.TempDir(), "mlx"), Options{Bits: 4}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("MLX export of a mixture: %v, want ErrUnsupported", err)
	}
	o.SparseStep = 2 // layer 0 dense
	if err := CheckGGUFSource(demoDir(t, o)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a mixture with a dense layer: %v, want ErrUnsupported", err)
	}
}
