package embed_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"fusion/engine/backend/cpu"
	"fusion/engine/embed"
	"fusion/engine/embed/embedtest"
	"fusion/internal/testenv"
)

// TestXLMRobertaParity embeds texts with a random-weight XLM-RoBERTa in
// the sentence-transformers layout of multilingual-e5-small (the
// generated SentencePiece unigram tokenizer, positions from padding_idx
// + 1, mean pooling, Normalize, 512 tokens, e5's "query: " prompt) and
// with sentence-transformers: the tokens must be equal and the vectors'
// cosine ≥ minCosine, as documents and as queries, texts past 512 tokens
// included.
func TestXLMRobertaParity(t *testing.T) {
	python := testenv.Python(t)
	dir := embedtest.XLMRoberta(t)
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
	if c := m.Config; c.Pooling != embed.PoolMean || !c.Normalize || c.MaxSeqLen != 512 || c.Prompts["query"] != "query: " {
		t.Fatalf("config %+v, want mean pooling, normalized, 512 tokens, e5's prompts", c)
	}
	texts := sentences(256)
	for _, name := range []string{"", "query"} {
		start := time.Now()
		refs := embedtest.STReference(t, python, dir, texts, name)
		t.Logf("prompt %q: sentence-transformers %v", name, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		prompt, err := m.Prompt(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		worst, truncated, longest := 1.0, 0, 0
		for lo := 0; lo < len(texts); lo += 16 {
			hi := min(lo+16, len(texts))
			var seqs [][]int
			for i, s := range texts[lo:hi] {
				ids, cut := m.Tokens(prompt+s, nil)
				if cut {
					truncated++
				}
				longest = max(longest, len(ids))
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
		t.Logf("prompt %q: %d texts (%d truncated to 512 tokens): cosine min %.9f (1 − %.1e)", name, len(texts), truncated, worst, 1-worst)
		if truncated == 0 || longest != 512 {
			t.Errorf("no text reached the 512-token limit (longest %d): the last positions are not tested", longest)
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
