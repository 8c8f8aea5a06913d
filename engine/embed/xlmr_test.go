package embed_test

import (
	"testing"

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
	m := loadCPU(t, dir)
	if c := m.Config; c.Pooling != embed.PoolMean || !c.Normalize || c.MaxSeqLen != 512 || c.Prompts["query"] != "query: " {
		t.Fatalf("config %+v, want mean pooling, normalized, 512 tokens, e5's prompts", c)
	}
	checkPromptParity(t, python, dir, m, sentences(256), "", "query")
}
