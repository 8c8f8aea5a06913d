package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/engine/runner"
	"fusion/router/openai"
)

// Models is what the model routes need of the engine pool (the runner
// implements it).
type Models interface {
	Load(ctx context.Context, name string) error
	Unload(ctx context.Context, name string) error
	List() []runner.ModelStatus
}

// ModelEntry is one model of GET /admin/api/models.
type ModelEntry struct {
	ID       string `json:"id"`
	State    string `json:"state"` // unloaded, loading, ready (requests in flight), idle
	Bytes    int64  `json:"bytes"`
	KVBytes  int64  `json:"kv_bytes"`
	Pinned   bool   `json:"pinned"`
	Active   int    `json:"active"`
	LastUsed *int64 `json:"last_used"` // unix seconds; null if never used
	Backend  string `json:"backend"`   // compute backend it runs (or will load) on: mlx or cpu
}

// ModelList is the answer of GET /admin/api/models.
type ModelList struct {
	Object string       `json:"object"` // "list"
	Data   []ModelEntry `json:"data"`
}

// ModelAction is the answer of POST /admin/api/models/{id}/load|unload.
type ModelAction struct {
	Status string     `json:"status"` // "ok"
	Model  ModelEntry `json:"model"`
}

func (h *Handler) mountModels(r chi.Router) {
	if h.models == nil {
		return
	}
	r.Get("/admin/api/models", h.listModels)
	r.Post("/admin/api/models/{id}/load", h.modelAction(Models.Load))
	r.Post("/admin/api/models/{id}/unload", h.modelAction(Models.Unload))
}

func entryOf(s runner.ModelStatus) ModelEntry {
	e := ModelEntry{ID: s.ID, State: string(s.State), Bytes: s.Bytes, KVBytes: s.KVBytes, Pinned: s.Pinned, Active: s.Active, Backend: s.Backend}
	if !s.LastUsed.IsZero() {
		u := s.LastUsed.Unix()
		e.LastUsed = &u
	}
	return e
}

func (h *Handler) listModels(w http.ResponseWriter, r *http.Request) {
	out := ModelList{Object: "list", Data: []ModelEntry{}}
	for _, s := range h.models.List() {
		out.Data = append(out.Data, entryOf(s))
	}
	openai.WriteJSON(w, http.StatusOK, out)
}

// modelAction loads or unloads the model named by the path: unknown 404,
// busy (unload with requests in flight) 409, over the memory budget 503.
func (h *Handler) modelAction(do func(Models, context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
		defer cancel()
		if err := do(h.models, ctx, id); err != nil {
			if errors.Is(err, runner.ErrBusy) {
				openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Code: "model_busy", Param: "id", Message: err.Error()})
				return
			}
			openai.WriteError(w, openai.EngineError(err, id))
			return
		}
		for _, s := range h.models.List() {
			if s.ID == id {
				openai.WriteJSON(w, http.StatusOK, ModelAction{Status: "ok", Model: entryOf(s)})
				return
			}
		}
		openai.WriteError(w, openai.ModelNotFound(id))
	}
}
