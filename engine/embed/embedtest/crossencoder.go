// Package embedtest builds model fixtures for the embedding and reranking
// tests: a cross-encoder in the exact Hugging Face layout of a
// BertForSequenceClassification checkpoint, made from the
// all-MiniLM-L6-v2 fixture's encoder and a seeded random one-label head
// (no registry package ships a cross-encoder's weights).
package embedtest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
	"fusion/internal/testenv"
)

// CrossEncoder writes the cross-encoder fixture into a temporary
// directory and returns it.
func CrossEncoder(t testing.TB) string {
	t.Helper()
	src := testenv.EmbeddingModelDir(t, "all-minilm-l6-v2")
	dir := filepath.Join(t.TempDir(), "reranker")
	if err := WriteCrossEncoder(src, dir, 21); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Activations of a cross-encoder's config, as sentence-transformers'
// CrossEncoder saves them.
const (
	Sigmoid  = "torch.nn.modules.activation.Sigmoid"
	Identity = "torch.nn.modules.linear.Identity"
)

// WriteCrossEncoder writes into dst a BertForSequenceClassification
// checkpoint (one label, sigmoid activation as sentence-transformers'
// CrossEncoder saves it) with src's BERT weights under "bert." and a
// classifier drawn from seed.
func WriteCrossEncoder(src, dst string, seed uint64) error {
	return WriteCrossEncoderWith(src, dst, seed, Sigmoid)
}

// WriteCrossEncoderWith is WriteCrossEncoder with the activation
// (Sigmoid or Identity) config.json names.
func WriteCrossEncoderWith(src, dst string, seed uint64, activation string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fmt.Errorf("%s/config.json: %w", src, err)
	}
	hidden, ok := cfg["hidden_size"].(float64)
	if !ok || hidden < 1 {
		return fmt.Errorf("%s/config.json: no hidden_size", src)
	}
	cfg["architectures"] = []string{"BertForSequenceClassification"}
	cfg["id2label"] = map[string]string{"0": "LABEL_0"}
	cfg["label2id"] = map[string]int{"LABEL_0": 0}
	cfg["sentence_transformers"] = map[string]string{"activation_fn": activation}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), out, 0o644); err != nil {
		return err
	}

	ws, err := modelfile.OpenWeights(src, safetensors.LoadRead)
	if err != nil {
		return err
	}
	defer ws.Close()
	var tensors []tensor.Tensor
	for _, name := range ws.Names() {
		if strings.HasSuffix(name, "position_ids") {
			continue // a buffer transformers rebuilds, not a weight
		}
		t, _ := ws.Tensor(name)
		t.Name = "bert." + strings.TrimPrefix(name, "bert.")
		tensors = append(tensors, t)
	}
	h := int(hidden)
	rng := rand.New(rand.NewPCG(seed, 2026))
	w := make([]float32, h)
	for i := range w {
		// Logits of a few units across texts: sigmoid scores that differ.
		w[i] = float32(rng.NormFloat64() * 4 / math.Sqrt(float64(h)))
	}
	tensors = append(tensors,
		tensor.Tensor{Name: "classifier.weight", DType: tensor.F32, Shape: []int64{1, int64(h)}, Data: f32Bytes(w)},
		tensor.Tensor{Name: "classifier.bias", DType: tensor.F32, Shape: []int64{1}, Data: f32Bytes([]float32{0.25})})
	return safetensors.WriteFile(filepath.Join(dst, "model.safetensors"), tensors, map[string]string{"format": "pt"})
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
