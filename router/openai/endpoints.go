package openai

import (
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/router/requestid"
)

// chatEncoder adapts the chat collector and stream to encoder.
type chatEncoder struct {
	*chatCollector
	s *chatStream
}

func (c chatEncoder) result() any                        { return c.chatCollector.result() }
func (c chatEncoder) start() []any                       { return anys(c.s.start()) }
func (c chatEncoder) event(i int, ev engine.Event) []any { return anys(c.s.event(i, ev)) }
func (c chatEncoder) end() []any                         { return anys(c.s.end()) }

// completionsEncoder adapts completionEncoder to encoder.
type completionsEncoder struct{ *completionEncoder }

func (c completionsEncoder) result() any  { return c.completionEncoder.result() }
func (c completionsEncoder) start() []any { return anys(c.completionEncoder.start()) }
func (c completionsEncoder) event(i int, ev engine.Event) []any {
	return anys(c.completionEncoder.event(i, ev))
}
func (c completionsEncoder) end() []any { return anys(c.completionEncoder.end()) }

// POST /v1/chat/completions
func (h *Handler) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if e := decodeBody(r, &req); e != nil {
		h.reject(w, r, e)
		return
	}
	p, e := req.toPlan(h.opts, requestid.From(r.Context()), h.mcp)
	if e != nil {
		h.reject(w, r, e)
		return
	}
	m := h.newMeta("chatcmpl-", req.Model)
	h.run(w, r, req.Model, p, chatEncoder{newChatCollector(m, p), newChatStream(m, p)})
}

// POST /v1/completions
func (h *Handler) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if e := decodeBody(r, &req); e != nil {
		h.reject(w, r, e)
		return
	}
	p, prompts, e := req.toPlan(h.opts, requestid.From(r.Context()))
	if e != nil {
		h.reject(w, r, e)
		return
	}
	var echo []string
	if req.Echo != nil && *req.Echo {
		var err error
		echo, err = echoTexts(prompts, func(ids []int) (string, error) { return h.engine.Detokenize(r.Context(), req.Model, ids) })
		if err != nil {
			h.reject(w, r, engineError(err, req.Model))
			return
		}
	}
	m := h.newMeta("cmpl-", req.Model)
	h.run(w, r, req.Model, p, completionsEncoder{newCompletionEncoder(m, p, echo)})
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the answer of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

func toModel(m engine.ModelInfo) Model {
	return Model{ID: m.ID, Object: "model", Created: m.Created, OwnedBy: "fusion"}
}

// GET /v1/models
func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	models, err := h.engine.Models(r.Context())
	if err != nil {
		WriteError(w, FromEngine(err))
		return
	}
	out := ModelList{Object: "list", Data: make([]Model, len(models))}
	for i, m := range models {
		out.Data[i] = toModel(m)
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /v1/models/{id}; ids may hold slashes ("org/name").
func (h *Handler) getModel(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "*")
	models, err := h.engine.Models(r.Context())
	if err != nil {
		WriteError(w, FromEngine(err))
		return
	}
	for _, m := range models {
		if m.ID == id {
			writeJSON(w, http.StatusOK, toModel(m))
			return
		}
	}
	WriteError(w, ModelNotFound(id))
}

// tokenizeRequest is the body of POST /tokenize.
type tokenizeRequest struct {
	Model               string          `json:"model"`
	Prompt              *string         `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	EnableThinking      *bool           `json:"enable_thinking"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs"`
}

// POST /tokenize: {model, prompt} or {model, messages, tools?, ...} →
// {tokens, count, prompt?}.
func (h *Handler) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if e := decodeBody(r, &req); e != nil {
		WriteError(w, e)
		return
	}
	if req.Model == "" {
		WriteError(w, missingParam("model"))
		return
	}
	pr := prompt.Request{Prompt: req.Prompt, AddGenerationPrompt: req.AddGenerationPrompt, EnableThinking: req.EnableThinking,
		AddSpecialTokens: req.AddSpecialTokens, ChatTemplateKwargs: req.ChatTemplateKwargs}
	hasMessages := !isNull(req.Messages)
	switch {
	case req.Prompt != nil && hasMessages:
		WriteError(w, invalidRequest("messages", "Give either 'prompt' or 'messages', not both."))
		return
	case req.Prompt == nil && !hasMessages:
		WriteError(w, missingParam("prompt"))
		return
	case hasMessages:
		msgs, e := parseMessages(req.Messages)
		if e != nil {
			WriteError(w, e)
			return
		}
		pr.Messages = msgs
		if pr.Tools, e = parseToolList(req.Tools); e != nil {
			WriteError(w, e)
			return
		}
	}
	res, err := h.engine.Tokenize(r.Context(), req.Model, pr)
	if err != nil {
		WriteError(w, engineError(err, req.Model))
		return
	}
	if res.Tokens == nil {
		res.Tokens = []int{}
	}
	writeJSON(w, http.StatusOK, res)
}

// detokenizeRequest is the body of POST /detokenize.
type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

// DetokenizeResult is the answer of POST /detokenize.
type DetokenizeResult struct {
	Prompt string `json:"prompt"`
}

// POST /detokenize: {model, tokens} → {prompt}.
func (h *Handler) detokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if e := decodeBody(r, &req); e != nil {
		WriteError(w, e)
		return
	}
	switch {
	case req.Model == "":
		WriteError(w, missingParam("model"))
		return
	case req.Tokens == nil:
		WriteError(w, missingParam("tokens"))
		return
	}
	for i, id := range req.Tokens {
		if id < 0 {
			WriteError(w, invalidRequest("tokens", "Invalid 'tokens[%d]': %d is not a token id.", i, id))
			return
		}
	}
	text, err := h.engine.Detokenize(r.Context(), req.Model, req.Tokens)
	if err != nil {
		WriteError(w, engineError(err, req.Model))
		return
	}
	writeJSON(w, http.StatusOK, DetokenizeResult{Prompt: text})
}
