package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"

	"fusion/engine"
)

// EmbeddingRequest is the body of POST /v1/embeddings.
type EmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
	// Truncate (a fusion extension, default true) cuts inputs longer than
	// the model's limit, as sentence-transformers does, and marks them
	// "truncated" in the answer; false makes such an input a 400.
	Truncate *bool `json:"truncate"`
	// PromptName and Prompt (fusion extensions, sentence-transformers'
	// encode arguments) put an instruction before every text input: the
	// model's prompt of that name (Qwen3-Embedding's "query"), or the
	// text given, which wins. Without either the model's default prompt
	// applies, if it has one.
	PromptName string  `json:"prompt_name"`
	Prompt     *string `json:"prompt"`
}

// EmbeddingResponse is the answer of POST /v1/embeddings.
type EmbeddingResponse struct {
	Object string          `json:"object"` // "list"
	Data   []EmbeddingData `json:"data"`
	Model  string          `json:"model"`
	Usage  EmbeddingUsage  `json:"usage"`
}

// EmbeddingData is one vector: a list of floats, or with encoding_format
// base64 the little-endian float32 bytes in base64.
type EmbeddingData struct {
	Object    string `json:"object"` // "embedding"
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
	// Truncated (extension) marks an input cut to the model's limit.
	Truncated bool `json:"truncated,omitempty"`
}

// EmbeddingUsage counts the tokens the model ran.
type EmbeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// toEngine checks the request and converts it to the neutral one.
func (req *EmbeddingRequest) toEngine() (*engine.EmbedRequest, *Error) {
	if req.Model == "" {
		return nil, missingParam("model")
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, invalidRequest("encoding_format", "Invalid 'encoding_format': %q (expected 'float' or 'base64').", req.EncodingFormat)
	}
	out := &engine.EmbedRequest{Model: req.Model, NoTruncate: req.Truncate != nil && !*req.Truncate, Prompt: req.Prompt, PromptName: req.PromptName}
	if req.Dimensions != nil {
		if *req.Dimensions < 1 {
			return nil, invalidRequest("dimensions", "Invalid 'dimensions': %d (expected a positive integer).", *req.Dimensions)
		}
		out.Dimensions = *req.Dimensions
	}
	inputs, e := parseEmbeddingInput(req.Input)
	if e != nil {
		return nil, e
	}
	out.Inputs = inputs
	return out, nil
}

// parseEmbeddingInput reads input: a string, an array of strings, an
// array of token ids, or an array of arrays of token ids; none may be
// empty.
func parseEmbeddingInput(raw json.RawMessage) ([]engine.EmbedInput, *Error) {
	items, e := parseTextsOrIDs(raw, "input")
	if e != nil {
		return nil, e
	}
	out := make([]engine.EmbedInput, len(items))
	for i, it := range items {
		param := "input"
		if len(items) > 1 || !isString(raw) {
			param = fmt.Sprintf("input[%d]", i)
		}
		if it.text == nil {
			out[i] = engine.EmbedInput{Tokens: it.tokens}
			continue
		}
		if *it.text == "" {
			return nil, invalidRequest(param, "Invalid '%s': empty string.", param)
		}
		out[i] = engine.EmbedInput{Text: *it.text}
	}
	return out, nil
}

// isString reports whether a JSON value is a string.
func isString(raw json.RawMessage) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil
}

// POST /v1/embeddings
func (h *Handler) embeddings(w http.ResponseWriter, r *http.Request) {
	var req EmbeddingRequest
	if e := decodeUTF8Body(r, &req); e != nil {
		h.reject(w, r, e)
		return
	}
	ereq, e := req.toEngine()
	if e != nil {
		h.reject(w, r, e)
		return
	}
	emb, ok := h.engine.(engine.Embedder)
	if !ok {
		h.reject(w, r, &Error{Status: http.StatusNotImplemented, Type: TypeInvalidRequest, Code: "unsupported",
			Message: "This server's engine does not compute embeddings."})
		return
	}
	res, err := emb.Embed(r.Context(), ereq)
	if err != nil {
		h.reject(w, r, engineError(err, req.Model))
		return
	}
	out := EmbeddingResponse{Object: "list", Model: req.Model, Data: make([]EmbeddingData, len(res.Vectors)),
		Usage: EmbeddingUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	for i, v := range res.Vectors {
		d := EmbeddingData{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			d.Embedding = base64Floats(v)
		}
		out.Data[i] = d
	}
	for _, i := range res.Truncated {
		if i >= 0 && i < len(out.Data) {
			out.Data[i].Truncated = true
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// base64Floats encodes v as little-endian float32 bytes in base64, what
// the OpenAI SDKs decode for encoding_format base64.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
