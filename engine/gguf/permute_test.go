package gguf

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"fusion/engine/tensor"
)

// rowIDs returns a tensor of rows×cols float32 whose row r holds r.
func rowIDs(rows, cols int) tensor.Tensor {
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i / cols)
	}
	return tensor.Tensor{Name: "q", DType: tensor.F32, Shape: []int64{int64(rows), int64(cols)}, Data: f32Bytes(x)}
}

func rowOrder(t *testing.T, tt tensor.Tensor) []int {
	t.Helper()
	x := bytesF32(tt.Data)
	cols := int(tt.Shape[1])
	out := make([]int, tt.Shape[0])
	for r := range out {
		out[r] = int(x[r*cols])
	}
	return out
}

func TestPermuteQKOrder(t *testing.T) {
	tests := []struct {
		name  string
		rows  int
		heads int
		want  []int // HF row found at each GGUF row
	}{
		{"one head of 8", 8, 1, []int{0, 4, 1, 5, 2, 6, 3, 7}},
		{"two heads of 4", 8, 2, []int{0, 2, 1, 3, 4, 6, 5, 7}},
		{"heads of 2 are unchanged", 4, 2, []int{0, 1, 2, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PermuteQK(rowIDs(tc.rows, 3), tc.heads)
			if err != nil {
				t.Fatal(err)
			}
			got := rowOrder(t, p)
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("GGUF rows hold HF rows %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestPermuteQKRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tests := []struct {
		dt    tensor.DType
		shape []int64
		heads int
	}{
		{tensor.F32, []int64{64, 16}, 4},    // Q: 4 heads of 16
		{tensor.F16, []int64{32, 64}, 2},    // K: 2 KV heads
		{tensor.Q4_K, []int64{128, 256}, 8}, // quantized rows move whole
		{tensor.Q8_0, []int64{96, 64}, 3},
		{tensor.F32, []int64{64}, 4}, // a bias: one element per row
	}
	for _, tc := range tests {
		n, _ := tensor.NumElements(tc.shape)
		size, _ := tc.dt.ByteSize(n)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		orig := tensor.Tensor{Name: "w", DType: tc.dt, Shape: tc.shape, Data: data}
		p, err := PermuteQK(orig, tc.heads)
		if err != nil {
			t.Fatalf("%v %v: %v", tc.dt, tc.shape, err)
		}
		if bytes.Equal(p.Data, data) {
			t.Errorf("%v %v: permutation changed nothing", tc.dt, tc.shape)
		}
		back, err := UnpermuteQK(p, tc.heads)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Data, data) {
			t.Errorf("%v %v: unpermute(permute(w)) != w", tc.dt, tc.shape)
		}
	}
}

func TestPermuteQKErrors(t *testing.T) {
	if _, err := PermuteQK(rowIDs(6, 2), 2); err == nil {
		t.Error("odd head size: no error")
	}
	if _, err := PermuteQK(rowIDs(8, 2), 0); err == nil {
		t.Error("zero heads: no error")
	}
	q := tensor.Tensor{Name: "b", DType: tensor.Q8_0, Shape: []int64{64}, Data: make([]byte, 68)}
	if _, err := PermuteQK(q, 2); err == nil {
		t.Error("quantized 1-D tensor: no error")
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ hf, gguf string }{
		{"model.embed_tokens.weight", "token_embd.weight"},
		{"model.norm.weight", "output_norm.weight"},
		{"lm_head.weight", "output.weight"},
		{"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
		{"model.layers.11.self_attn.k_proj.weight", "blk.11.attn_k.weight"},
		{"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias"},
		{"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
		{"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
		{"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight"},
		{"model.layers.27.input_layernorm.weight", "blk.27.attn_norm.weight"},
		{"model.layers.27.post_attention_layernorm.weight", "blk.27.ffn_norm.weight"},
		{"model.layers.2.mlp.gate_proj.weight", "blk.2.ffn_gate.weight"},
		{"model.layers.2.mlp.up_proj.weight", "blk.2.ffn_up.weight"},
		{"model.layers.2.mlp.down_proj.weight", "blk.2.ffn_down.weight"},
		{"model.layers.5.mlp.gate.weight", "blk.5.ffn_gate_inp.weight"},
		{"model.layers.5.mlp.switch_mlp.gate_proj.weight", "blk.5.ffn_gate_exps.weight"},
		{"model.layers.5.mlp.switch_mlp.up_proj.weight", "blk.5.ffn_up_exps.weight"},
		{"model.layers.47.mlp.switch_mlp.down_proj.weight", "blk.47.ffn_down_exps.weight"},
	}
	for _, tc := range tests {
		if got, ok := GGUFName(tc.hf); !ok || got != tc.gguf {
			t.Errorf("GGUFName(%q) = %q, %v; want %q", tc.hf, got, ok, tc.gguf)
		}
		if got, ok := HFName(tc.gguf); !ok || got != tc.hf {
			t.Errorf("HFName(%q) = %q, %v; want %q", tc.gguf, got, ok, tc.hf)
		}
	}
	for _, bad := range []string{"model.layers.x.mlp.up_proj.weight", "model.layers.01.mlp.up_proj.weight", "model.rotary_emb.inv_freq", "blk.0.ffn_up", "blk.-1.ffn_up.weight",
		"model.layers.0.mlp.experts.0.gate_proj.weight", "blk.0.ffn_gate_shexp.weight"} {
		if got, ok := GGUFName(bad); ok {
			t.Errorf("GGUFName(%q) = %q, want no mapping", bad, got)
		}
		if got, ok := HFName(bad); ok {
			t.Errorf("HFName(%q) = %q, want no mapping", bad, got)
		}
	}
	for _, tc := range [][2]string{{"qwen3_moe", "qwen3moe"}, {"qwen3", "qwen3"}, {"llama", "llama"}} {
		if got := GGUFArch(tc[0]); got != tc[1] {
			t.Errorf("GGUFArch(%q) = %q, want %q", tc[0], got, tc[1])
		}
		if got := HFArch(tc[1]); got != tc[0] {
			t.Errorf("HFArch(%q) = %q, want %q", tc[1], got, tc[0])
		}
	}
}
