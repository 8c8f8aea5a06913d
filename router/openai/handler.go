package openai

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/router/mcpchat"
	"fusion/router/metrics"
	"fusion/router/requestid"
)

// Config is what the OpenAI dialect needs.
type Config struct {
	Engine            engine.Generator
	Metrics           *metrics.Metrics
	Options           Options
	SystemFingerprint string
	Logger            *slog.Logger
	// MCP runs the MCP tools chat completions ask for (nil: none).
	MCP *mcpchat.Runner
}

// Handler serves the OpenAI dialect.
type Handler struct {
	engine  engine.Generator
	metrics *metrics.Metrics
	opts    Options
	fp      string
	log     *slog.Logger
	mcp     *mcpchat.Runner
	images  *ImageStore // url results of image generations
}

// New returns the handler of the OpenAI dialect.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	images := cfg.Options.ImageFiles
	if images == nil {
		images = NewImageStore(0)
	}
	return &Handler{engine: cfg.Engine, metrics: cfg.Metrics, opts: cfg.Options, fp: cfg.SystemFingerprint, log: cfg.Logger, mcp: cfg.MCP,
		images: images}
}

// Mount registers the dialect's routes on r.
func (h *Handler) Mount(r chi.Router) {
	r.Post("/v1/chat/completions", h.chatCompletions)
	r.Post("/v1/completions", h.completions)
	r.Post("/v1/embeddings", h.embeddings)
	r.Post("/v1/rerank", h.rerank)
	r.Post("/v1/audio/transcriptions", h.transcriptions)
	r.Post("/v1/audio/translations", h.translations)
	r.Post("/v1/audio/speech", h.speech)
	r.Get("/v1/audio/voices", h.voices)
	r.Post("/v1/images/generate", h.imagesGenerate)
	r.Post("/v1/images/generations", h.imagesGenerate)
	r.Get("/v1/images/files/{id}", h.imageFile)
	r.Post("/v1/audio/process", h.audioProcess)
	r.Post("/rerank", h.rerank)
	r.Get("/v1/models", h.listModels)
	r.Get("/v1/models/*", h.getModel)
	r.Post("/tokenize", h.tokenize)
	r.Post("/detokenize", h.detokenize)
}

// reject answers a generation request refused before it reached a model.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, e *Error) {
	h.metrics.Rejected()
	h.log.LogAttrs(r.Context(), slog.LevelDebug, "request refused", slog.String("request_id", requestid.From(r.Context())),
		slog.Int("status", e.Status), slog.String("param", e.Param), slog.String("message", e.Message))
	WriteError(w, e)
}

// engineError maps an engine error, naming the model on a 404.
func engineError(err error, model string) *Error {
	if errors.Is(err, engine.ErrModelNotFound) {
		return ModelNotFound(model)
	}
	return FromEngine(err)
}

// newMeta starts the answer of a request.
func (h *Handler) newMeta(prefix, model string) meta {
	return meta{ID: prefix + requestid.New()[:24], Created: time.Now().Unix(), Model: model, SystemFingerprint: h.fp}
}

// encoder is the answer side of one generation request: chat or
// completions, streamed or not.
type encoder interface {
	add(i int, ev engine.Event)         // non-streamed: record an event
	result() any                        // non-streamed: the answer
	start() []any                       // streamed: the first chunks
	event(i int, ev engine.Event) []any // streamed: the chunks of an event
	end() []any                         // streamed: the last chunks before [DONE]
}

// run admits the plan's requests and answers with enc.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, model string, p *plan, enc encoder) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	generate := h.engine.Generate
	if p.mcp != nil {
		generate = func(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
			return p.mcp.Generate(ctx, h.engine, req)
		}
	}
	events, err := startAll(ctx, generate, p.reqs)
	if err != nil {
		cancel()
		h.reject(w, r, engineError(err, model))
		return
	}
	g := h.metrics.BeginFor(r.Context(), model)
	var t tally
	outcome := metrics.OK
	defer func() {
		pt, gt := t.totals(p)
		g.End(outcome, pt, gt)
	}()

	if !p.stream {
		for ev := range events {
			t.note(ev, g)
			if ev.Err != nil {
				outcome = metrics.Failed
				cancel()
				WriteError(w, engineError(ev.Err, model))
				return
			}
			enc.add(ev.Index, ev.Event)
		}
		if !t.complete(p) { // the client went away
			outcome = metrics.Cancelled
			return
		}
		writeJSON(w, http.StatusOK, enc.result())
		return
	}

	sse := newSSEWriter(w)
	write := func(chunks []any) bool {
		for _, c := range chunks {
			if err := sse.data(c); err != nil {
				return false
			}
		}
		return true
	}
	first := true
	for ev := range events {
		t.note(ev, g)
		if ev.Err != nil {
			outcome = metrics.Failed
			cancel()
			if first { // nothing sent yet: a proper error answer
				WriteError(w, engineError(ev.Err, model))
			} else {
				_ = sse.fail(engineError(ev.Err, model))
			}
			return
		}
		if first {
			first = false
			if !write(enc.start()) {
				break
			}
		}
		if !write(enc.event(ev.Index, ev.Event)) {
			break
		}
	}
	if !t.complete(p) { // the client went away
		outcome = metrics.Cancelled
		return
	}
	if !write(enc.end()) || sse.done() != nil {
		outcome = metrics.Cancelled
	}
}

// tally counts what a request's events carried, for the metrics.
type tally struct {
	usages map[int]engine.Usage // final usage of each finished choice
	tokens int                  // tokens seen in events
}

func (t *tally) note(ev indexedEvent, g *metrics.Generation) {
	if ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0 || len(ev.Tokens) > 0 {
		g.FirstToken()
	}
	t.tokens += len(ev.Tokens)
	if ev.Done && ev.Err == nil {
		if t.usages == nil {
			t.usages = map[int]engine.Usage{}
		}
		t.usages[ev.Index] = ev.Usage
	}
}

// complete reports whether every choice finished.
func (t *tally) complete(p *plan) bool { return len(t.usages) == len(p.reqs) }

// totals returns the prompt and generated tokens: the engine's usage when
// every choice finished, else the tokens seen so far.
func (t *tally) totals(p *plan) (prompt, generated int) {
	if !t.complete(p) {
		return 0, t.tokens
	}
	per := make([]engine.Usage, len(p.reqs))
	for i, u := range t.usages {
		per[i] = u
	}
	u := usage(per, p.promptOf)
	return u.PromptTokens, u.CompletionTokens
}

// anys turns a typed slice into []any for the encoder interface.
func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
