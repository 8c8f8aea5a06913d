package embedtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
	"fusion/engine/tensor"
	"fusion/engine/tokenizer/corpus"
	"fusion/internal/testenv"
)

// QueryPrompt is the query instruction of the Qwen3-Embedding fixture,
// Qwen/Qwen3-Embedding-0.6B's "query" prompt.
const QueryPrompt = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"

// Qwen3MaxSeqLen is the fixture's max_seq_length (the real model's is
// 8192; a short one lets tests reach it).
const Qwen3MaxSeqLen = 128

// Qwen3Embedding writes the Qwen3-Embedding fixture into a temporary
// directory and returns it.
func Qwen3Embedding(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "qwen3-embedding")
	if err := WriteQwen3Embedding(testenv.TokenizerDir(t, "qwen3"), dir, 21); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteQwen3Embedding writes into dst a random-weight Qwen3 (the demo
// model of `fusion models create-demo`, float32, with the real Qwen3
// tokenizer of tokenizerDir, weights drawn from seed) in the layout of
// Qwen/Qwen3-Embedding-0.6B: weights named as Qwen3Model saves them (no
// "model." prefix, no lm_head), a tokenizer whose post-processor appends
// <|endoftext|> and pads on the left, and the sentence-transformers files
// (last-token pooling, Normalize, the query instruction prompt).
func WriteQwen3Embedding(tokenizerDir, dst string, seed uint64) error {
	m, err := demo.Build(demo.Options{Arch: modelfile.ArchQwen3, DType: "f32", VocabFrom: tokenizerDir, Seed: seed})
	if err != nil {
		return err
	}
	if err := demo.Write(dst, m); err != nil {
		return err
	}
	if err := bareWeights(dst); err != nil {
		return err
	}
	eos := 0
	if err := editJSON(filepath.Join(dst, "tokenizer.json"), func(doc map[string]json.RawMessage) error {
		var added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(doc["added_tokens"], &added); err != nil {
			return err
		}
		for _, a := range added {
			if a.Content == "<|endoftext|>" {
				eos = a.ID
			}
		}
		if eos == 0 {
			return fmt.Errorf("no <|endoftext|> among the added tokens")
		}
		seq := func(id string, ty int) map[string]any {
			return map[string]any{"Sequence": map[string]any{"id": id, "type_id": ty}}
		}
		end := func(ty int) map[string]any {
			return map[string]any{"SpecialToken": map[string]any{"id": "<|endoftext|>", "type_id": ty}}
		}
		return setJSON(doc, "post_processor", map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{seq("A", 0), end(0)},
			"pair":   []any{seq("A", 0), end(0), seq("B", 1), end(1)},
			"special_tokens": map[string]any{"<|endoftext|>": map[string]any{
				"id": "<|endoftext|>", "ids": []int{eos}, "tokens": []string{"<|endoftext|>"}}},
		})
	}); err != nil {
		return err
	}
	if err := editJSON(filepath.Join(dst, "tokenizer_config.json"), func(doc map[string]json.RawMessage) error {
		return setJSON(doc, "padding_side", "left")
	}); err != nil {
		return err
	}
	st := map[string]any{
		"modules.json": []map[string]any{
			{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
			{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
			{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
		},
		"1_Pooling/config.json": map[string]any{
			"word_embedding_dimension": m.Options.Hidden, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false,
			"pooling_mode_max_tokens": false, "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
			"pooling_mode_lasttoken": true, "include_prompt": true,
		},
		"sentence_bert_config.json": map[string]any{"max_seq_length": Qwen3MaxSeqLen, "do_lower_case": false},
		"config_sentence_transformers.json": map[string]any{
			"prompts": map[string]string{"query": QueryPrompt, "document": ""}, "default_prompt_name": nil, "similarity_fn_name": "cosine",
		},
	}
	for _, sub := range []string{"1_Pooling", "2_Normalize"} {
		if err := os.MkdirAll(filepath.Join(dst, sub), 0o755); err != nil {
			return err
		}
	}
	for name, v := range st {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// bareWeights renames dir's weights as the bare decoder saves them: no
// "model." prefix, no LM head.
func bareWeights(dir string) error {
	ws, err := modelfile.OpenWeights(dir, safetensors.LoadRead)
	if err != nil {
		return err
	}
	var tensors []tensor.Tensor
	for _, name := range ws.Names() {
		if strings.HasPrefix(name, "lm_head.") {
			continue
		}
		t, _ := ws.Tensor(name)
		t.Name = strings.TrimPrefix(name, "model.")
		tensors = append(tensors, t)
	}
	tmp := filepath.Join(dir, "model.safetensors.tmp")
	err = safetensors.WriteFile(tmp, tensors, map[string]string{"format": "pt"})
	if cerr := ws.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, modelfile.SingleWeightsFile))
}

// editJSON rewrites a JSON object file through edit, keeping the values
// it does not touch byte for byte.
func editJSON(path string, edit func(map[string]json.RawMessage) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := edit(doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if data, err = json.Marshal(doc); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func setJSON(doc map[string]json.RawMessage, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	doc[key] = raw
	return nil
}

// XLMRoberta returns the XLM-RoBERTa embedding fixture (a random-weight
// XLMRobertaModel in multilingual-e5-small's sentence-transformers layout,
// with the generated XLM-R tokenizer; see corpus.XLMRModel), building it
// into the fixtures cache on first use.
func XLMRoberta(t testing.TB) string { return generated(t, corpus.XLMRModel) }

// XLMRReranker returns the XLM-RoBERTa cross-encoder fixture (see
// corpus.XLMRReranker), building it into the fixtures cache on first use.
func XLMRReranker(t testing.TB) string { return generated(t, corpus.XLMRReranker) }

func generated(t testing.TB, build func(ctx context.Context, python, cacheDir string) (string, error)) string {
	t.Helper()
	dir, err := build(context.Background(), testenv.Python(t), testenv.FixturesDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
