package runner

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/embed/embedtest"
	"fusion/engine/prompt"
	"fusion/internal/testenv"
)

// TestRerankRequests: a cross-encoder in the pool scores every document
// of a request in one pass, each score bit-identical to the document
// scored alone; the model is listed as a reranker; bad requests and
// other kinds of model are InvalidRequestErrors naming the problem.
func TestRerankRequests(t *testing.T) {
	r := newEmbedRunner(t, Config{MaxRerankDocuments: 6})
	if err := embedtest.WriteCrossEncoder(testenv.EmbeddingModelDir(t, "all-minilm-l6-v2"), filepath.Join(r.cfg.ModelsDir, "reranker"), 21); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	query := "how do vector databases find similar passages?"
	docs := []string{"A vector database answers nearest-neighbour queries.", "The weather in Paris is mild.",
		"HNSW indexes trade recall for speed.", "😀", "Cosine similarity compares directions.", "x"}
	alone := make([]float32, len(docs))
	tokens := 0
	for i, d := range docs {
		res, err := r.Rerank(ctx, &engine.RerankRequest{Model: "reranker", Query: query, Documents: []string{d}})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = res.Scores[0]
		tokens += res.PromptTokens
	}
	before := r.EmbedStats()
	res, err := r.Rerank(ctx, &engine.RerankRequest{Model: "reranker", Query: query, Documents: docs})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.EmbedStats().Passes - before.Passes; d != 1 {
		t.Errorf("six documents took %d passes, want 1", d)
	}
	if !slices.Equal(res.Scores, alone) {
		t.Errorf("scores %v batched, %v alone", res.Scores, alone)
	}
	if res.PromptTokens != tokens || len(res.Truncated) != 0 {
		t.Errorf("%d tokens, truncated %v; want %d, none", res.PromptTokens, res.Truncated, tokens)
	}
	if slices.Min(alone) == slices.Max(alone) {
		t.Errorf("every document scores %v", alone[0])
	}
	models, err := r.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(models, func(m engine.ModelInfo) bool { return m.ID == "reranker" }); i < 0 || models[i].Kind != engine.KindRerank {
		t.Errorf("models %+v: the reranker is not listed as %q", models, engine.KindRerank)
	}

	long := strings.Repeat("long passage ", 400)
	bad := []struct {
		name string
		req  engine.RerankRequest
		want string
	}{
		{"empty query", engine.RerankRequest{Model: "reranker", Documents: []string{"a"}}, "query must not be empty"},
		{"no documents", engine.RerankRequest{Model: "reranker", Query: "q"}, "documents must not be empty"},
		{"too many", engine.RerankRequest{Model: "reranker", Query: "q", Documents: make([]string, 7)}, "at most 6"},
		{"empty document", engine.RerankRequest{Model: "reranker", Query: "q", Documents: []string{"a", ""}}, "documents[1] is an empty string"},
		{"no truncation", engine.RerankRequest{Model: "reranker", Query: "q", Documents: []string{long}, NoTruncate: true}, "longer than the model's 512 tokens"},
		{"chat model", engine.RerankRequest{Model: "chat", Query: "q", Documents: []string{"a"}}, `"chat" is a chat model`},
		{"embedding model", engine.RerankRequest{Model: "minilm", Query: "q", Documents: []string{"a"}}, `"minilm" is an embedding model`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Rerank(ctx, &c.req)
			var ie *prompt.InvalidRequestError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want an InvalidRequestError with %q", err, c.want)
			}
		})
	}
	cut, err := r.Rerank(ctx, &engine.RerankRequest{Model: "reranker", Query: "q", Documents: []string{"a", long}})
	if err != nil || !slices.Equal(cut.Truncated, []int{1}) {
		t.Errorf("a long document: %v, truncated %v; want [1]", err, cut)
	}
	if _, err := r.Embed(ctx, &engine.EmbedRequest{Model: "reranker", Inputs: texts("a")}); err == nil || !strings.Contains(err.Error(), "is a rerank model") {
		t.Errorf("embeddings from the reranker: %v", err)
	}
	if _, err := r.Generate(ctx, chat("reranker", "Hello", 2)); err == nil || !strings.Contains(err.Error(), "/v1/rerank") {
		t.Errorf("generation on the reranker: %v", err)
	}
	if _, err := r.Rerank(ctx, &engine.RerankRequest{Model: "nope", Query: "q", Documents: []string{"a"}}); !errors.Is(err, engine.ErrModelNotFound) {
		t.Errorf("unknown model: %v", err)
	}
}
