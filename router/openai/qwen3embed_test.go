package openai_test

import (
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/embed/embedtest"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

const qwen3EmbedModel = "qwen3-embedding"

type embedAnswer struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
		Truncated bool      `json:"truncated"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Message string  `json:"message"`
	} `json:"error"`
}

// TestQwen3Embeddings serves a Qwen3-Embedding checkpoint (a
// random-weight create-demo qwen3 in its layout) through /v1/embeddings
// on the node that has it and through a forwarding node of its 3-node
// cluster: documents without a prompt, queries with prompt_name "query"
// (the model's instruction) or the same instruction as prompt, each
// vector with cosine ≥ 0.9999 to sentence-transformers' encode, usage
// counting sentence-transformers' tokens.
func TestQwen3Embeddings(t *testing.T) {
	py := testenv.Python(t)
	models := nodetest.Models(t)
	dir := filepath.Join(models, qwen3EmbedModel)
	if err := embedtest.WriteQwen3Embedding(testenv.TokenizerDir(t, "qwen3"), dir, 21); err != nil {
		t.Fatal(err)
	}
	texts := []string{
		"What is the capital of China?",
		"Explain gravity",
		"The capital of China is Beijing.",
		"Gravity is a force that attracts two bodies towards each other.",
		"Der schnelle braune Fuchs springt über den faulen Hund. 😀",
		strings.Repeat("a long passage about vector search ", 40), // past 128 tokens
	}
	prompt := embedtest.QueryPrompt
	refs := map[string][]embedtest.EmbedRef{
		"":      embedtest.STReference(t, py, dir, texts, ""),
		"query": embedtest.STReference(t, py, dir, texts, "query"),
	}
	// The cluster starts after the reference (see TestRerank).
	a, c := forwardingCluster(t, models, "/v1/embeddings", map[string]any{"model": qwen3EmbedModel, "input": "warm up"})
	for _, n := range []struct {
		name string
		node *node.Node
	}{{"local", a}, {"forwarded", c}} {
		for _, tc := range []struct {
			name, ref string
			extra     map[string]any
		}{
			{"document", "", nil},
			{"prompt_name", "query", map[string]any{"prompt_name": "query"}},
			{"prompt", "query", map[string]any{"prompt": prompt}},
		} {
			body := map[string]any{"model": qwen3EmbedModel, "input": texts}
			for k, v := range tc.extra {
				body[k] = v
			}
			var out embedAnswer
			if code := post(t, n.node, "/v1/embeddings", body, &out); code != http.StatusOK {
				t.Fatalf("%s %s: status %d %+v", n.name, tc.name, code, out.Error)
			}
			want := refs[tc.ref]
			if len(out.Data) != len(texts) {
				t.Fatalf("%s %s: %d vectors for %d texts", n.name, tc.name, len(out.Data), len(texts))
			}
			tokens, worst := 0, 1.0
			for i, d := range out.Data {
				tokens += len(want[i].IDs)
				cos := cosine64(d.Embedding, want[i].Vector)
				worst = min(worst, cos)
				if cos < 0.9999 {
					t.Errorf("%s %s: text %d: cosine %.6f with sentence-transformers", n.name, tc.name, i, cos)
				}
				if d.Truncated != (i == len(texts)-1) {
					t.Errorf("%s %s: text %d truncated=%v", n.name, tc.name, i, d.Truncated)
				}
			}
			if out.Usage.PromptTokens != tokens {
				t.Errorf("%s %s: usage %d tokens, sentence-transformers tokenizes %d", n.name, tc.name, out.Usage.PromptTokens, tokens)
			}
			t.Logf("%s %s: cosine min 1 − %.1e", n.name, tc.name, 1-worst)
		}
		for _, bad := range []struct {
			name string
			body map[string]any
			msg  string
		}{
			{"unknown prompt name", map[string]any{"model": qwen3EmbedModel, "input": "x", "prompt_name": "passage"}, "no prompt"},
			{"prompt on token ids", map[string]any{"model": qwen3EmbedModel, "input": []int{1, 2}, "prompt_name": "query"}, "token ids"},
			{"dimensions", map[string]any{"model": qwen3EmbedModel, "input": "x", "dimensions": 8}, "dimensions"},
		} {
			var out embedAnswer
			if code := post(t, n.node, "/v1/embeddings", bad.body, &out); code != http.StatusBadRequest || out.Error == nil ||
				out.Error.Type != "invalid_request_error" || !strings.Contains(out.Error.Message, bad.msg) {
				t.Errorf("%s %s: status %d, error %+v; want 400 saying %q", n.name, bad.name, code, out.Error, bad.msg)
			}
		}
	}
}

func cosine64(a, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += a[i] * b[i]
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	return dot / math.Sqrt(na*nb)
}
