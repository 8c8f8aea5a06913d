package modelfile

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// moeJSON is a valid Qwen3-MoE config (4 layers) with edits.
func moeJSON(t *testing.T, edits obj) []byte {
	e := obj{"architectures": []string{"Qwen3MoeForCausalLM"}, "model_type": "qwen3_moe", "num_hidden_layers": 4,
		"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1,
		"norm_topk_prob": true, "tie_word_embeddings": nil}
	for k, v := range edits {
		e[k] = v
	}
	return cfgJSON(t, e)
}

func TestParseMoEConfig(t *testing.T) {
	c, err := ParseConfig(moeJSON(t, obj{"decoder_sparse_step": 2, "mlp_only_layers": []int{3}}))
	if err != nil {
		t.Fatal(err)
	}
	want := MoE{Experts: 8, TopK: 2, Intermediate: 32, SparseStep: 2, MLPOnlyLayers: []int{3}, NormTopK: true}
	if c.Architecture != ArchQwen3MoE || c.MoE == nil || c.MoE.Experts != want.Experts || c.MoE.TopK != want.TopK ||
		c.MoE.Intermediate != want.Intermediate || c.MoE.SparseStep != want.SparseStep || !slices.Equal(c.MoE.MLPOnlyLayers, want.MLPOnlyLayers) || !c.MoE.NormTopK {
		t.Fatalf("MoE = %+v, want %+v", c.MoE, want)
	}
	if c.TieWordEmbeddings {
		t.Error("tie_word_embeddings defaults to true, Qwen3-MoE's default is false")
	}
	// Layer 1 is the only sparse one: 0 and 2 fail the step, 3 is MLP-only.
	var sparse []int
	for l := range 4 {
		if c.MoE.Sparse(l) {
			sparse = append(sparse, l)
		}
	}
	if !slices.Equal(sparse, []int{1}) {
		t.Errorf("sparse layers %v, want [1]", sparse)
	}
	if c, err := ParseConfig(moeJSON(t, obj{"num_experts": 0})); err != nil || c.MoE.Sparse(0) {
		t.Errorf("no experts: %v, sparse %v", err, c.MoE.Sparse(0))
	}
	if c, err := ParseConfig(cfgJSON(t, nil)); err != nil || c.MoE != nil || c.MoE.Sparse(0) {
		t.Errorf("dense qwen3: MoE %+v, %v", c.MoE, err)
	}
}

func TestParseMoEConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edits obj
		msg   string
	}{
		{"missing num_experts", obj{"num_experts": nil}, "missing num_experts"},
		{"missing experts per token", obj{"num_experts_per_tok": nil}, "missing num_experts_per_tok"},
		{"missing expert width", obj{"moe_intermediate_size": nil}, "missing moe_intermediate_size"},
		{"missing sparse step", obj{"decoder_sparse_step": nil}, "missing decoder_sparse_step"},
		{"zero sparse step", obj{"decoder_sparse_step": 0}, "decoder_sparse_step 0"},
		{"top k above experts", obj{"num_experts_per_tok": 9}, "exceeds num_experts 8"},
		{"absurd experts", obj{"num_experts": 1 << 20}, "num_experts"},
		{"mlp-only layer out of range", obj{"mlp_only_layers": []int{4}}, "mlp_only_layers names layer 4 of 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := obj{}
			for k, v := range tc.edits {
				e[k] = v
			}
			raw := moeJSON(t, e)
			if v, ok := tc.edits["num_experts"]; ok && v == nil {
				raw = cfgJSON(t, obj{"architectures": []string{"Qwen3MoeForCausalLM"}, "model_type": "qwen3_moe", "num_experts_per_tok": 2,
					"moe_intermediate_size": 32, "decoder_sparse_step": 1})
			}
			_, err := ParseConfig(raw)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error = %v, want ErrInvalidConfig mentioning %q", err, tc.msg)
			}
		})
	}
}

// Stacked experts split into per-expert views of the file's bytes, float
// and quantized; a stack that does not fit is an error naming the expert.
func TestLookupExperts(t *testing.T) {
	const n, out, in = 3, 16, 64
	float := f32Tensor("f.weight", 1, n, out, in)
	// quantTensors is deterministic: the quantized experts are equal (the
	// float ones, all distinct values, check each expert's offset).
	var q []tensor.Tensor
	var want [][]float32
	for range n {
		ts, w := quantTensors(t, "q", out, in, 32, 4)
		q, want = append(q, ts...), append(want, w)
	}
	stack := func(name string, parts ...tensor.Tensor) tensor.Tensor {
		s := tensor.Tensor{Name: name, DType: parts[0].DType, Shape: append([]int64{int64(len(parts))}, parts[0].Shape...)}
		for _, p := range parts {
			s.Data = append(s.Data, p.Data...)
		}
		return s
	}
	qw := stack("q.weight", q[0], q[3], q[6])
	qs := stack("q.scales", q[1], q[4], q[7])
	qb := stack("q.biases", q[2], q[5], q[8])
	bad := stack("b.weight", q[0], q[3], q[6])
	badScales := stack("b.scales", q[1], q[4]) // two experts' scales for three
	badBiases := stack("b.biases", q[2], q[5])
	quant := map[string]any{"group_size": 32, "bits": 4, "f": false}
	dir := tinyDir(t, map[string]any{"quantization": quant},
		map[string][]tensor.Tensor{SingleWeightsFile: {float, qw, qs, qb, bad, badScales, badBiases}})
	ws, err := OpenWeights(dir, safetensors.LoadRead)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := LookupExperts(ws, c.Quantization, "f")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := ToFloat32(float)
	for e, l := range fs {
		got, err := l.Dequantize()
		if err != nil || l.Quantized || l.Out != out || l.In != in || !slices.Equal(got, all[e*out*in:(e+1)*out*in]) {
			t.Fatalf("float expert %d: %+v %v", e, l, err)
		}
	}
	qs3, err := LookupExperts(ws, c.Quantization, "q")
	if err != nil {
		t.Fatal(err)
	}
	for e, l := range qs3 {
		got, err := l.Dequantize()
		if err != nil || !l.Quantized || l.Bits != 4 || l.GroupSize != 32 || l.Out != out || l.In != in {
			t.Fatalf("quantized expert %d: %+v %v", e, l, err)
		}
		scales, _ := ToFloat32(l.Scales)
		for i := range got {
			if d := abs32(got[i] - want[e][i]); d > 1.5*abs32(scales[i/32]) {
				t.Fatalf("expert %d value %d: %v, want about %v", e, i, got[i], want[e][i])
			}
		}
	}
	if _, err := LookupExperts(ws, c.Quantization, "b"); err == nil || !strings.Contains(err.Error(), "expert 0") {
		t.Errorf("mismatched scales: %v", err)
	}
	if _, err := LookupExperts(ws, c.Quantization, "missing"); !errors.Is(err, ErrMissingTensor) {
		t.Errorf("missing stack: %v", err)
	}
}
