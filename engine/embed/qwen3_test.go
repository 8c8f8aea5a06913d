package embed_test

import (
	"context"
	"slices"
	"testing"

	"fusion/engine/backend/cpu"
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
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := embed.Load(context.Background(), dir, be, false)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Config
	if c.Pooling != embed.PoolLastToken || !c.Normalize || c.MaxSeqLen != embedtest.Qwen3MaxSeqLen ||
		c.Prompts["query"] != embedtest.QueryPrompt || c.DefaultPrompt != "" || c.ExcludePrompt {
		t.Fatalf("config %+v, want last-token pooling, normalized, %d tokens, the query prompt", c, embedtest.Qwen3MaxSeqLen)
	}
	texts := sentences(96)
	for _, name := range []string{"", "query"} {
		refs := embedtest.STReference(t, python, dir, texts, name)
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
		t.Logf("prompt %q: %d texts (%d truncated to %d tokens): cosine min %.9f (1 − %.1e)", name, len(texts), truncated, embedtest.Qwen3MaxSeqLen, worst, 1-worst)
		if truncated == 0 {
			t.Errorf("no text reached the %d-token limit", embedtest.Qwen3MaxSeqLen)
		}
		// Parity proves little if every text gets about the same vector.
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
	if _, err := m.Prompt("passage", nil); err == nil {
		t.Error("an unknown prompt name was accepted")
	}
}
