package embed_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"fusion/engine/embed"
	"fusion/engine/embed/embedtest"
	"fusion/internal/testenv"
)

// TestQwen3EmbeddingParity embeds texts with a random-weight Qwen3 in
// Qwen3-Embedding's layout (bare decoder weights, the tokenizer's
// appended <|endoftext|>, last-token pooling, Normalize, the query
// instruction) and with sentence-transformers, as documents (no prompt)
// and as queries (prompt_name "query"): the tokens must be equal and the
// vectors' cosine ≥ minCosine.
func TestQwen3EmbeddingParity(t *testing.T) {
	python := testenv.Python(t)
	dir := embedtest.Qwen3Embedding(t)
	if !embed.IsEmbeddingModel(dir) || embed.IsCrossEncoder(dir) {
		t.Fatal("the fixture is not recognised as an embedding model")
	}
	m := loadCPU(t, dir)
	c := m.Config
	if c.Pooling != embed.PoolLastToken || !c.Normalize || c.MaxSeqLen != embedtest.Qwen3MaxSeqLen ||
		c.Prompts["query"] != embedtest.QueryPrompt || c.DefaultPrompt != "" || c.ExcludePrompt {
		t.Fatalf("config %+v, want last-token pooling, normalized, %d tokens, the query prompt", c, embedtest.Qwen3MaxSeqLen)
	}
	checkPromptParity(t, python, dir, m, sentences(96), "", "query")
	if _, err := m.Prompt("passage", nil); err == nil {
		t.Error("an unknown prompt name was accepted")
	}
}

// checkPromptParity embeds texts with m and with sentence-transformers
// (from dir) under each prompt name ("" for none): the tokens must be
// equal and the vectors' cosine ≥ minCosine; some text must be cut at
// the model's limit, and neighbouring texts' vectors must differ (parity
// proves little if every text gets about the same vector).
func checkPromptParity(t *testing.T, python, dir string, m *embed.Model, texts []string, names ...string) {
	t.Helper()
	limit := m.Config.MaxSeqLen
	for _, name := range names {
		start := time.Now()
		refs := embedtest.STReference(t, python, dir, texts, name)
		t.Logf("prompt %q: sentence-transformers %v", name, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		prompt, err := m.Prompt(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		worst, truncated := 1.0, 0
		for lo := 0; lo < len(texts); lo += 16 {
			hi := min(lo+16, len(texts))
			var seqs [][]int
			for i, s := range texts[lo:hi] {
				ids, cut := m.Tokens(prompt+s, nil)
				if cut {
					truncated++
					if len(ids) != limit {
						t.Errorf("prompt %q, text %d: cut to %d tokens, want %d", name, lo+i, len(ids), limit)
					}
				}
				if want := refs[lo+i].IDs; !slices.Equal(ids, want) {
					t.Fatalf("prompt %q, text %d: tokens %v, sentence-transformers %v", name, lo+i, ids, want)
				}
				seqs = append(seqs, ids)
			}
			got, err := m.Embed(context.Background(), seqs, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range got {
				c := cosine(v, refs[lo+i].Vector)
				worst = min(worst, c)
				if c < minCosine {
					t.Errorf("prompt %q, text %d %q: cosine %.6f with sentence-transformers", name, lo+i, trim(texts[lo+i]), c)
				}
			}
		}
		t.Logf("prompt %q: fusion %v", name, time.Since(start).Round(time.Millisecond))
		t.Logf("prompt %q: %d texts (%d truncated to %d tokens): cosine min %.9f (1 − %.1e)", name, len(texts), truncated, limit, worst, 1-worst)
		if truncated == 0 {
			t.Errorf("no text reached the %d-token limit", limit)
		}
		var spread float64
		for i := 1; i < len(refs); i++ {
			f := make([]float32, len(refs[i].Vector))
			for j, x := range refs[i].Vector {
				f[j] = float32(x)
			}
			spread += cosine(f, refs[i-1].Vector)
		}
		if spread /= float64(len(refs) - 1); spread > 0.95 {
			t.Errorf("neighbouring texts' vectors have a mean cosine of %.4f: the fixture does not tell texts apart", spread)
		}
	}
}
