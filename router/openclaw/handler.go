package openclaw

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/router/jsonkind"
	"fusion/router/mcpchat"
	"fusion/router/metrics"
	"fusion/router/openai"
	"fusion/router/wire"
)

// Defaults of the options.
const (
	DefaultHeartbeat    = 30 * time.Second
	DefaultStreamBuffer = 256
	DefaultMaxHistory   = 8 << 20
)

// Options are the protocol's limits.
type Options struct {
	// TTL and Cap configure the MemStore the router builds when it is
	// given no store (defaults 1 h and 1000).
	TTL time.Duration
	Cap int
	// Heartbeat is the interval of the stream's heartbeat events
	// (default 30 s).
	Heartbeat time.Duration
	// StreamBuffer is how many events a stream may fall behind before it
	// is dropped (default 256).
	StreamBuffer int
	// MaxHistoryBytes bounds the JSON of a session's history (default 8
	// MiB): a turn, steer or tool result that would grow it past the
	// bound is a 400. (The model's context bounds what a turn can use;
	// this bounds what a session can store, and replicate.)
	MaxHistoryBytes int
}

// Config is what the OpenClaw dialect needs.
type Config struct {
	// Engine runs the turns (the router's generator: the local engine, or
	// the dispatcher in a cluster).
	Engine engine.Generator
	Store  SessionStore
	// OpenAI holds the chat API's limits (max_tokens cap, backends), which
	// turns share.
	OpenAI  openai.Options
	Options Options
	// Metrics counts the turns as generations (nil: a private registry).
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// MCP runs the MCP tools a session's tools name (nil: none).
	MCP *mcpchat.Runner
}

// Handler serves the OpenClaw agent protocol.
type Handler struct {
	engine  engine.Generator
	store   SessionStore
	chat    openai.Options
	opts    Options
	metrics *metrics.Metrics
	log     *slog.Logger
	hub     *hub
	unsub   func()
	mcp     *mcpchat.Runner
}

// New returns the handler and subscribes it to the store's changes;
// Shutdown ends its streams and unsubscribes it.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Options.Heartbeat <= 0 {
		cfg.Options.Heartbeat = DefaultHeartbeat
	}
	if cfg.Options.StreamBuffer <= 0 {
		cfg.Options.StreamBuffer = DefaultStreamBuffer
	}
	if cfg.Options.MaxHistoryBytes <= 0 {
		cfg.Options.MaxHistoryBytes = DefaultMaxHistory
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	h := &Handler{engine: cfg.Engine, store: cfg.Store, chat: cfg.OpenAI, opts: cfg.Options, metrics: cfg.Metrics, log: cfg.Logger,
		hub: newHub(cfg.Options.StreamBuffer), mcp: cfg.MCP}
	h.unsub = cfg.Store.Subscribe(h.hub.publish)
	return h
}

// Shutdown ends every event stream (the server is draining: streams never
// finish on their own) and stops listening to the store.
func (h *Handler) Shutdown() {
	h.unsub()
	h.hub.close()
}

// Mount registers the protocol's routes on r.
func (h *Handler) Mount(r chi.Router) {
	r.Route("/v1/openclaw/agent", func(r chi.Router) {
		r.Post("/sessions", h.createSession)
		r.Get("/sessions", h.listSessions)
		r.Get("/sessions/{id}", h.getSession)
		r.Delete("/sessions/{id}", h.deleteSession)
		r.Post("/turns", h.turn)
		r.Post("/tool-results", h.toolResult)
		r.Post("/steer", h.steer)
		r.Get("/stream/{id}", h.stream)
	})
}

// storeError maps a store error to the answer.
func storeError(err error, id string) *openai.Error {
	switch {
	case errors.Is(err, ErrNotFound):
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "session_id", Code: "session_not_found",
			Message: fmt.Sprintf("No session '%s' (it may have expired or been deleted).", id)}
	case errors.Is(err, ErrConflict):
		return &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Param: "session_id", Code: "turn_in_progress",
			Message: fmt.Sprintf("Session '%s' is running a turn; wait for it to end before starting another.", id)}
	case errors.Is(err, ErrCapacity):
		return &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "session_cap_reached", RetryAfter: 1,
			Message: "Every session slot holds a session in a turn; retry when one ends."}
	case errors.Is(err, ErrUnknownToolCall):
		return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: "tool_call_id", Code: "unknown_tool_call_id",
			Message: fmt.Sprintf("No assistant message of session '%s' made that tool call.", id)}
	case errors.Is(err, ErrToolCallAnswered):
		return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: "tool_call_id", Code: "tool_call_answered",
			Message: fmt.Sprintf("That tool call of session '%s' already has a result.", id)}
	case errors.Is(err, ErrBadEdit):
		return openai.InvalidRequest("", "%s", err.Error())
	case errors.Is(err, ErrUnavailable):
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "sessions_unavailable", RetryAfter: 2,
			Message: "The session store cannot be reached right now (the cluster has no leader); retry shortly."}
	}
	return openai.FromEngine(err)
}

// newID returns a random session id (24 hex digits).
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (h *Handler) write(w http.ResponseWriter, v any) {
	b, err := wire.Marshal(v)
	if err != nil {
		openai.WriteError(w, openai.Internal())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if e := openai.DecodeBody(r, &req); e != nil {
		openai.WriteError(w, e)
		return
	}
	if req.Model == nil || *req.Model == "" {
		openai.WriteError(w, openai.MissingParam("model"))
		return
	}
	if e := openai.CheckChatTools(req.Tools); e != nil {
		openai.WriteError(w, e)
		return
	}
	if err := h.checkModel(r.Context(), *req.Model); err != nil {
		openai.WriteError(w, err)
		return
	}
	ns := NewSession{Model: *req.Model}
	if req.SystemPrompt != nil {
		ns.SystemPrompt = *req.SystemPrompt
	}
	if !isNull(req.Tools) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Tools); err == nil {
			ns.Tools = buf.Bytes()
		}
	}
	var s *Session
	var err error
	for range 3 { // a duplicate of 96 random bits is all but impossible
		ns.ID = newID()
		if s, err = h.store.Create(r.Context(), ns); !errors.Is(err, ErrExists) {
			break
		}
	}
	if err != nil {
		openai.WriteError(w, storeError(err, ns.ID))
		return
	}
	h.log.LogAttrs(r.Context(), slog.LevelDebug, "openclaw session created", slog.String("session_id", s.ID), slog.String("model", s.Model))
	h.write(w, infoOf(s, false))
}

// checkModel answers 404 for a model the engine does not have.
func (h *Handler) checkModel(ctx context.Context, model string) *openai.Error {
	models, err := h.engine.Models(ctx)
	if err != nil {
		return openai.FromEngine(err)
	}
	for _, m := range models {
		if m.ID == model {
			return nil
		}
	}
	return openai.ModelNotFound(model)
}

func (h *Handler) getSession(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s, err := h.store.Touch(r.Context(), id)
	if err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	h.write(w, infoOf(s, true))
}

func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if err := h.store.Destroy(r.Context(), id); err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	h.write(w, Deleted{SessionID: id, Deleted: true})
}

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request) {
	list, err := h.store.List(r.Context())
	if err != nil {
		openai.WriteError(w, storeError(err, ""))
		return
	}
	out := SessionList{Object: "list", Sessions: make([]SessionInfo, len(list)), Count: len(list)}
	for i, s := range list {
		out.Sessions[i] = infoOf(s, false)
	}
	h.write(w, out)
}

// requiredString checks a required string field of a body.
func requiredString(v *string, param string) (string, *openai.Error) {
	if v == nil || *v == "" {
		return "", openai.MissingParam(param)
	}
	return *v, nil
}

func (h *Handler) toolResult(w http.ResponseWriter, r *http.Request) {
	var req toolResultRequest
	if e := openai.DecodeBody(r, &req); e != nil {
		openai.WriteError(w, e)
		return
	}
	id, e := requiredString(req.SessionID, "session_id")
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	callID, e := requiredString(req.ToolCallID, "tool_call_id")
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if isNull(req.Result) {
		openai.WriteError(w, openai.MissingParam("result"))
		return
	}
	// A string is the tool's output as it is; any other JSON value is sent
	// to the model as its JSON text.
	var result string
	if err := json.Unmarshal(req.Result, &result); err != nil {
		var buf bytes.Buffer
		_ = json.Compact(&buf, req.Result)
		result = buf.String()
	}
	msg, _ := wire.Marshal(map[string]string{"role": "tool", "tool_call_id": callID, "content": result})
	if e := h.checkRoom(r.Context(), id, msg); e != nil {
		openai.WriteError(w, e)
		return
	}
	s, err := h.store.Edit(r.Context(), id, Edit{Mode: EditAppend, Message: msg, ToolCallID: callID})
	if err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	h.write(w, infoOf(s, false))
}

func (h *Handler) steer(w http.ResponseWriter, r *http.Request) {
	var req steerRequest
	if e := openai.DecodeBody(r, &req); e != nil {
		openai.WriteError(w, e)
		return
	}
	id, e := requiredString(req.SessionID, "session_id")
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	mode := EditAppend
	if req.Mode != nil {
		mode = EditMode(*req.Mode)
		if !mode.Valid() {
			openai.WriteError(w, openai.InvalidRequest("mode", "Invalid value: '%s'. Supported values are: 'append', 'prepend' and 'replace'.", *req.Mode))
			return
		}
	}
	if isNull(req.Message) {
		openai.WriteError(w, openai.MissingParam("message"))
		return
	}
	msg, e := checkOneMessage(req.Message, "message")
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if e := h.checkRoom(r.Context(), id, msg); e != nil {
		openai.WriteError(w, e)
		return
	}
	s, err := h.store.Edit(r.Context(), id, Edit{Mode: mode, Message: msg})
	if err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	h.write(w, infoOf(s, false))
}

// historyBytes is the size of a history's JSON.
func historyBytes(h []json.RawMessage) int {
	n := 2
	for _, m := range h {
		n += len(m) + 1
	}
	return n
}

// roomFor answers 400 when adding msgs to s would grow its history past
// the bound.
func (h *Handler) roomFor(s *Session, msgs ...json.RawMessage) *openai.Error {
	if historyBytes(s.History)+historyBytes(msgs) > h.opts.MaxHistoryBytes {
		return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "session_history_full",
			Message: fmt.Sprintf("Session '%s' would hold more than %d bytes of history; start a new session.", s.ID, h.opts.MaxHistoryBytes)}
	}
	return nil
}

// checkRoom is roomFor on the current state of session id (a check, not
// a reservation: concurrent edits may overshoot the bound by one).
func (h *Handler) checkRoom(ctx context.Context, id string, msg json.RawMessage) *openai.Error {
	s, err := h.store.Get(ctx, id)
	if err != nil {
		return storeError(err, id)
	}
	return h.roomFor(s, msg)
}

// checkOneMessage checks one chat message as the chat API does and
// returns its compact JSON; errors name it param.
func checkOneMessage(raw json.RawMessage, param string) (json.RawMessage, *openai.Error) {
	var probe any
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, openai.InvalidType(param, "a message object", jsonkind.Of(raw))
	}
	if _, ok := probe.(map[string]any); !ok {
		return nil, openai.InvalidType(param, "a message object", jsonkind.Of(raw))
	}
	list := append(append([]byte{'['}, raw...), ']')
	if _, e := openai.ParseMessages(list); e != nil {
		e.Param = strings.Replace(e.Param, "messages[0]", param, 1)
		e.Message = strings.ReplaceAll(e.Message, "messages[0]", param)
		return nil, e
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, raw)
	return buf.Bytes(), nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
