package openai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"fusion/engine"
	"fusion/router/jsonkind"
	"fusion/router/requestid"
)

// RerankRequest is the body of POST /v1/rerank (and /rerank). The API
// contract has no reranking route; this is the shape RAG clients send to
// Cohere, Jina and vLLM.
type RerankRequest struct {
	Model string `json:"model"`
	Query string `json:"query"`
	// Documents are strings, or objects with a "text" field (Cohere's
	// older form).
	Documents []json.RawMessage `json:"documents"`
	// TopN keeps the best n results (default: all).
	TopN *int `json:"top_n"`
	// ReturnDocuments puts each document's text in its result (default
	// false).
	ReturnDocuments bool `json:"return_documents"`
	// Truncate (a fusion extension, default true) cuts a query–document
	// pair longer than the model's limit, longest side first, as
	// sentence-transformers does; false makes such a pair a 400.
	Truncate *bool `json:"truncate"`
}

// RerankResponse is the answer of POST /v1/rerank: the results by score,
// best first.
type RerankResponse struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Results []RerankResult `json:"results"`
	Usage   RerankUsage    `json:"usage"`
}

// RerankResult is one document's score.
type RerankResult struct {
	Index          int             `json:"index"` // the document's place in the request
	RelevanceScore float32         `json:"relevance_score"`
	Document       *RerankDocument `json:"document,omitempty"`
	// Truncated (extension) marks a pair cut to the model's limit.
	Truncated bool `json:"truncated,omitempty"`
}

// RerankDocument is a document returned with its result.
type RerankDocument struct {
	Text string `json:"text"`
}

// RerankUsage counts the tokens the model ran (every pair, special
// tokens included).
type RerankUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// toEngine checks the request and converts it to the neutral one.
func (req *RerankRequest) toEngine() (*engine.RerankRequest, *Error) {
	if req.Model == "" {
		return nil, missingParam("model")
	}
	if req.Query == "" {
		return nil, invalidRequest("query", "Invalid 'query': it must be a non-empty string.")
	}
	if len(req.Documents) == 0 {
		return nil, invalidRequest("documents", "Invalid 'documents': it must be a non-empty array.")
	}
	if req.TopN != nil && *req.TopN < 1 {
		return nil, invalidRequest("top_n", "Invalid 'top_n': %d (expected a positive integer).", *req.TopN)
	}
	out := &engine.RerankRequest{Model: req.Model, Query: req.Query, NoTruncate: req.Truncate != nil && !*req.Truncate,
		Documents: make([]string, len(req.Documents))}
	for i, raw := range req.Documents {
		text, e := documentText(raw, i)
		if e != nil {
			return nil, e
		}
		out.Documents[i] = text
	}
	return out, nil
}

// documentText reads one document: a non-empty string or {"text": ...}.
func documentText(raw json.RawMessage, i int) (string, *Error) {
	param := fmt.Sprintf("documents[%d]", i)
	raw = bytes.TrimSpace(raw)
	var text string
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", invalidRequest(param, "Invalid '%s': %v.", param, err)
		}
	case len(raw) > 0 && raw[0] == '{':
		var doc struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil || doc.Text == nil {
			return "", invalidRequest(param, "Invalid '%s': an object document needs a string 'text'.", param)
		}
		text = *doc.Text
	default:
		return "", invalidType(param, "a string or an object with 'text'", jsonkind.Of(raw))
	}
	if text == "" {
		return "", invalidRequest(param, "Invalid '%s': empty string.", param)
	}
	return text, nil
}

// POST /v1/rerank
func (h *Handler) rerank(w http.ResponseWriter, r *http.Request) {
	var req RerankRequest
	if e := decodeUTF8Body(r, &req); e != nil {
		h.reject(w, r, e)
		return
	}
	ereq, e := req.toEngine()
	if e != nil {
		h.reject(w, r, e)
		return
	}
	rr, ok := h.engine.(engine.Reranker)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not rerank."})
		return
	}
	res, err := rr.Rerank(r.Context(), ereq)
	if err != nil {
		h.reject(w, r, engineError(err, req.Model))
		return
	}
	if len(res.Scores) != len(ereq.Documents) {
		h.reject(w, r, Internal())
		return
	}
	writeJSON(w, http.StatusOK, rerankResponse(requestid.From(r.Context()), &req, ereq.Documents, res))
}

// rerankResponse orders the scores best first (ties by document order)
// and keeps top_n of them.
func rerankResponse(id string, req *RerankRequest, docs []string, res *engine.RerankResult) RerankResponse {
	out := RerankResponse{ID: id, Model: req.Model, Results: make([]RerankResult, len(res.Scores)),
		Usage: RerankUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	for i, s := range res.Scores {
		out.Results[i] = RerankResult{Index: i, RelevanceScore: s, Truncated: slices.Contains(res.Truncated, i)}
		if req.ReturnDocuments {
			out.Results[i].Document = &RerankDocument{Text: docs[i]}
		}
	}
	slices.SortStableFunc(out.Results, func(a, b RerankResult) int { return cmp.Compare(b.RelevanceScore, a.RelevanceScore) })
	if req.TopN != nil && *req.TopN < len(out.Results) {
		out.Results = out.Results[:*req.TopN]
	}
	return out
}
