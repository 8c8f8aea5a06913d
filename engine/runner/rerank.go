package runner

import (
	"context"

	"fusion/engine"
)

// DefaultMaxRerankDocuments caps the documents of one rerank request (as
// Cohere's rerank API does).
const DefaultMaxRerankDocuments = 1000

// Rerank scores each document against the query with a cross-encoder of
// the pool (loading it, evicting others, as Embed does). The pairs share
// the model's batcher with every other request's. A pair longer than the
// model's limit is cut longest side first and listed, unless NoTruncate
// asks for an error.
func (r *Runner) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	if req.Query == "" {
		return nil, invalid("query must not be empty")
	}
	switch n := len(req.Documents); {
	case n == 0:
		return nil, invalid("documents must not be empty")
	case n > r.cfg.MaxRerankDocuments:
		return nil, invalid("documents has %d items; this server takes at most %d per request", n, r.cfg.MaxRerankDocuments)
	}
	for i, d := range req.Documents {
		if d == "" {
			return nil, invalid("documents[%d] is an empty string", i)
		}
	}
	em, done, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	if em == nil || em.ce == nil {
		kind := kindOf(em)
		return nil, invalid("model %q is a%s %s model; reranking needs a cross-encoder (a model with a sequence-classification head)", req.Model, article(kind), kind)
	}
	ce := em.ce
	res := &engine.RerankResult{}
	seqs, types := make([][]int, len(req.Documents)), make([][]int, len(req.Documents))
	for i, d := range req.Documents {
		ids, ty, cut := ce.Pair(req.Query, d)
		if cut {
			if req.NoTruncate {
				return nil, invalid("documents[%d] with the query is longer than the model's %d tokens", i, ce.MaxLen)
			}
			res.Truncated = append(res.Truncated, i)
		}
		seqs[i], types[i] = ids, ty
		res.PromptTokens += len(ids)
	}
	out, err := em.batch.embed(ctx, seqs, types, 0)
	if err != nil {
		return nil, err
	}
	res.Scores = make([]float32, len(out))
	for i, v := range out {
		res.Scores[i] = v[0]
	}
	return res, nil
}

// article is the indefinite article's tail before a kind: "n" before a
// vowel.
func article(kind string) string {
	if kind != "" && (kind[0] == 'e' || kind[0] == 'a') {
		return "n"
	}
	return ""
}
