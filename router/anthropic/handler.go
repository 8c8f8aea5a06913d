package anthropic

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/router/mcpchat"
	"fusion/router/metrics"
	"fusion/router/requestid"
)

// Config is what the Anthropic dialect needs.
type Config struct {
	Engine  engine.Generator
	Metrics *metrics.Metrics
	Options Options
	// ThinkingKey gives the key thinking blocks are signed with (the
	// cluster's; nil: RandomKey, good for one process only).
	ThinkingKey KeySource
	Logger      *slog.Logger
	// MCP runs the MCP tools requests ask for (nil: none).
	MCP *mcpchat.Runner
}

// Handler serves the Anthropic Messages dialect.
type Handler struct {
	engine  engine.Generator
	metrics *metrics.Metrics
	opts    Options
	codecs  *codecs
	log     *slog.Logger
	mcp     *mcpchat.Runner
}

// New returns the handler of the Anthropic dialect.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.ThinkingKey == nil {
		cfg.ThinkingKey = RandomKey()
	}
	return &Handler{engine: cfg.Engine, metrics: cfg.Metrics, opts: cfg.Options, codecs: &codecs{source: cfg.ThinkingKey}, log: cfg.Logger, mcp: cfg.MCP}
}

// Mount registers the dialect's routes on r. The anthropic-version and
// anthropic-beta headers are accepted and not checked.
func (h *Handler) Mount(r chi.Router) {
	r.Post("/v1/messages", h.messages)
	r.Post("/v1/messages/count_tokens", h.countTokens)
	r.Post("/v1/count_tokens", h.countTokens)
}

// Deny answers an authentication failure in Anthropic's shape (for the
// router's auth middleware).
func Deny(w http.ResponseWriter, msg string) { WriteError(w, Unauthorized(msg)) }

func (h *Handler) reject(w http.ResponseWriter, r *http.Request, e *Error) {
	h.metrics.Rejected()
	h.log.LogAttrs(r.Context(), slog.LevelDebug, "request refused", slog.String("request_id", requestid.From(r.Context())),
		slog.Int("status", e.Status), slog.String("message", e.Message))
	WriteError(w, e)
}

// decodeRequest reads the body and the codec its thinking blocks are
// checked (and the answer's signed) with.
func (h *Handler) decodeRequest(r *http.Request) (*MessagesRequest, *thinkingCodec, *Error) {
	body, e := readBody(r)
	if e != nil {
		return nil, nil, e
	}
	var req MessagesRequest
	if e := decodeJSON(body, &req); e != nil {
		return nil, nil, e
	}
	codec, err := h.codecs.get(r.Context())
	if err != nil {
		return nil, nil, keyUnavailable(err)
	}
	return &req, codec, nil
}

// POST /v1/messages.
func (h *Handler) messages(w http.ResponseWriter, r *http.Request) {
	req, codec, e := h.decodeRequest(r)
	if e != nil {
		h.reject(w, r, e)
		return
	}
	id := "msg_" + requestid.New()[:24]
	p, e := req.toPlan(h.opts, id, codec, h.mcp)
	if e != nil {
		h.reject(w, r, e)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	// A stream's message_start reports the prompt's size before any token
	// (a cloud upstream's model may be unknown here: its message_delta
	// gives the upstream's count).
	inputTokens := 0
	if p.stream && p.req.Backend != engine.BackendCloud {
		res, err := h.engine.Tokenize(ctx, req.Model, p.req.PromptRequest())
		if err != nil {
			h.reject(w, r, p.engineError(err, req.Model))
			return
		}
		inputTokens = res.Count
	}
	var events <-chan engine.Event
	var err error
	if p.mcp != nil {
		events, err = p.mcp.Generate(ctx, h.engine, p.req)
	} else {
		events, err = h.engine.Generate(ctx, p.req)
	}
	if err != nil {
		h.reject(w, r, p.engineError(err, req.Model))
		return
	}
	g := h.metrics.BeginFor(r.Context(), req.Model)
	outcome := metrics.OK
	var final *engine.Usage
	seen := 0
	defer func() {
		if final != nil {
			g.End(outcome, final.PromptTokens, final.CompletionTokens)
		} else {
			g.End(outcome, 0, seen)
		}
	}()
	note := func(ev engine.Event) {
		if ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0 || len(ev.Tokens) > 0 {
			g.FirstToken()
		}
		seen += len(ev.Tokens)
		if ev.Done && ev.Err == nil {
			u := ev.Usage
			final = &u
		}
	}

	sig := thinkingSigner{codec: codec, model: req.Model, omit: p.omitThinking}
	if !p.stream {
		acc := newAccumulator(id, req.Model, sig)
		for ev := range events {
			note(ev)
			if ev.Err != nil {
				outcome = metrics.Failed
				cancel()
				for range events {
				}
				WriteError(w, p.engineError(ev.Err, req.Model))
				return
			}
			acc.add(ev)
		}
		if final == nil { // the client went away
			outcome = metrics.Cancelled
			return
		}
		writeJSON(w, http.StatusOK, acc.result())
		return
	}

	sse := newSSEWriter(w)
	conv := newStreamConverter(id, req.Model, inputTokens, sig)
	ok := true
	send := func(evs []event) {
		for _, e := range evs {
			if ok && sse.write(e) != nil {
				ok = false
				cancel()
			}
		}
	}
	first := true
	for ev := range events {
		note(ev)
		if ev.Err != nil {
			outcome = metrics.Failed
			cancel()
			for range events {
			}
			if first { // nothing sent yet: a proper error answer
				WriteError(w, p.engineError(ev.Err, req.Model))
			} else if ok {
				_ = sse.fail(p.engineError(ev.Err, req.Model))
			}
			return
		}
		if first {
			first = false
			send(conv.start(ev))
		}
		send(conv.event(ev))
	}
	if final == nil || !ok {
		outcome = metrics.Cancelled
	}
}

// POST /v1/messages/count_tokens and /v1/count_tokens: the prompt's
// tokens, with system and tools rendered through the chat template.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request) {
	req, codec, e := h.decodeRequest(r)
	if e != nil {
		WriteError(w, e)
		return
	}
	pr, _, e := req.prompt("", codec, h.mcp)
	if e != nil {
		WriteError(w, e)
		return
	}
	res, err := h.engine.Tokenize(r.Context(), req.Model, pr.PromptRequest())
	if err != nil {
		WriteError(w, engineError(err, req.Model))
		return
	}
	writeJSON(w, http.StatusOK, CountTokensResult{InputTokens: res.Count})
}
