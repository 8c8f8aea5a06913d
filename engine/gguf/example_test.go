package gguf_test

import (
	"bytes"
	"fmt"
	"log"

	"fusion/engine/gguf"
	"fusion/engine/tensor"
)

// Writing a (tiny) model: architecture metadata from a ModelConfig,
// Hugging Face tensor names mapped to GGUF ones, weights quantized, and —
// for the llama architecture only — Q/K rows permuted to ggml's layout.
func ExampleWrite() {
	cfg := gguf.ModelConfig{
		ModelType: "llama", HiddenSize: 32, NumHiddenLayers: 1, NumAttentionHeads: 2, NumKeyValueHeads: 2,
		HeadDim: 16, IntermediateSize: 64, RMSNormEps: 1e-5, RopeTheta: 500000, MaxPositionEmbeddings: 2048, VocabSize: 8,
	}
	meta := append(cfg.KVs(), gguf.KV{Key: gguf.KeyName, Value: gguf.String("demo")})

	q := make([]float32, 32*256) // [out=32, in=256] HF q_proj weights
	for i := range q {
		q[i] = float32(i%17) / 17
	}
	name, _ := gguf.GGUFName("model.layers.0.self_attn.q_proj.weight")
	data, _ := gguf.Quantize(tensor.F32, q) // F32 "quantization" is the little-endian bytes
	rows := tensor.Tensor{Name: name, DType: tensor.F32, Shape: []int64{32, 256}, Data: data}
	if gguf.NeedsQKPermute(cfg.ModelType) {
		var err error
		if rows, err = gguf.PermuteQK(rows, cfg.NumAttentionHeads); err != nil {
			log.Fatal(err)
		}
	}
	x, _ := gguf.ToFloat32(rows)
	wt, err := gguf.QuantizeTensor(name, tensor.Q4_K, rows.Shape, x)
	if err != nil {
		log.Fatal(err)
	}

	var buf bytes.Buffer
	if err := gguf.Write(&buf, meta, []gguf.WriteTensor{wt}); err != nil {
		log.Fatal(err)
	}
	f, err := gguf.Parse("demo.gguf", buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	got, _ := f.ModelConfig()
	t, _ := f.Tensor("blk.0.attn_q.weight")
	fmt.Println(got.ModelType, got.HiddenSize, got.HeadDim, got.TieWordEmbeddings)
	fmt.Println(t.Name, t.DType, t.Shape, len(t.Data))
	// Output:
	// llama 32 16 true
	// blk.0.attn_q.weight Q4_K [32 256] 4608
}
