// Package admin serves the node's /admin/api routes. For now: the prefix
// cache's probe and its two clears, and the engine pool's model list,
// load and unload. Errors answer in the OpenAI shape, as
// the rest of the admin API does.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/engine/prefixcache"
	"fusion/engine/prompt"
	"fusion/router/openai"
)

// Cache is what the admin routes need of the engine's prefix cache (the
// runner implements it).
type Cache interface {
	// ProbeCache tokenizes req for model as a generation would and says
	// which of its blocks the cache holds, changing nothing.
	ProbeCache(ctx context.Context, model string, req prompt.Request) (prefixcache.Probe, error)
	ClearHotCache(ctx context.Context) (prefixcache.Cleared, error)
	ClearSSDCache(ctx context.Context) (prefixcache.Cleared, error)
}

// Handler serves the admin routes.
type Handler struct {
	cache  Cache
	models Models
}

// New makes the handler; a nil cache or models answers 404 on those
// routes' paths (no routes are mounted for them).
func New(cache Cache, models Models) *Handler { return &Handler{cache: cache, models: models} }

// Mount adds the routes to r (behind the caller's auth).
func (h *Handler) Mount(r chi.Router) {
	h.mountModels(r)
	if h.cache == nil {
		return
	}
	r.Post("/admin/api/cache/probe", h.probe)
	r.Post("/admin/api/ssd-cache/clear", h.clearSSD)
	r.Post("/admin/api/hot-cache/clear", h.clearHot)
}

// probeRequest is the body of POST /admin/api/cache/probe.
type probeRequest struct {
	ModelID             string          `json:"model_id"`
	Model               string          `json:"model"` // accepted for symmetry with the other routes
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	EnableThinking      *bool           `json:"enable_thinking"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs"`
}

// ProbeResponse is the answer of POST /admin/api/cache/probe, exactly the
// contract's fields.
type ProbeResponse struct {
	ModelID       string `json:"model_id"`
	ModelLoaded   bool   `json:"model_loaded"`
	TotalTokens   int    `json:"total_tokens"`
	BlockSize     int    `json:"block_size"`
	TotalBlocks   int    `json:"total_blocks"`
	BlocksSSDHot  int    `json:"blocks_ssd_hot"`
	BlocksSSDDisk int    `json:"blocks_ssd_disk"`
	BlocksCold    int    `json:"blocks_cold"`
	SSDHitTokens  int    `json:"ssd_hit_tokens"`
	ColdTokens    int    `json:"cold_tokens"`
}

func (h *Handler) probe(w http.ResponseWriter, r *http.Request) {
	var req probeRequest
	if e := openai.DecodeBody(r, &req); e != nil {
		openai.WriteError(w, e)
		return
	}
	model := req.ModelID
	if model == "" {
		model = req.Model
	}
	if model == "" {
		openai.WriteError(w, openai.MissingParam("model_id"))
		return
	}
	if len(req.Messages) == 0 || string(req.Messages) == "null" {
		openai.WriteError(w, openai.MissingParam("messages"))
		return
	}
	msgs, e := openai.ParseMessages(req.Messages)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	tools, e := openai.ParseTools(req.Tools)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	p, err := h.cache.ProbeCache(r.Context(), model, prompt.Request{Messages: msgs, Tools: tools,
		AddGenerationPrompt: req.AddGenerationPrompt, EnableThinking: req.EnableThinking, ChatTemplateKwargs: req.ChatTemplateKwargs})
	if err != nil {
		if errors.Is(err, engine.ErrModelNotFound) {
			err = openai.ModelNotFound(model)
		}
		openai.WriteError(w, err)
		return
	}
	openai.WriteJSON(w, http.StatusOK, ProbeResponse{
		ModelID: model, ModelLoaded: p.ModelLoaded, TotalTokens: p.TotalTokens, BlockSize: p.BlockSize,
		TotalBlocks: p.TotalBlocks, BlocksSSDHot: p.HotBlocks, BlocksSSDDisk: p.DiskBlocks, BlocksCold: p.ColdBlocks,
		SSDHitTokens: p.HitTokens, ColdTokens: p.ColdTokens,
	})
}

// ClearResponse is the answer of the clear routes.
type ClearResponse struct {
	Status        string `json:"status"`
	ClearedBlocks int    `json:"cleared_blocks"`
	ClearedBytes  int64  `json:"cleared_bytes"`
}

func (h *Handler) clearSSD(w http.ResponseWriter, r *http.Request) {
	h.clear(w, r, h.cache.ClearSSDCache)
}

func (h *Handler) clearHot(w http.ResponseWriter, r *http.Request) {
	h.clear(w, r, h.cache.ClearHotCache)
}

func (h *Handler) clear(w http.ResponseWriter, r *http.Request, f func(context.Context) (prefixcache.Cleared, error)) {
	c, err := f(r.Context())
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	openai.WriteJSON(w, http.StatusOK, ClearResponse{Status: "ok", ClearedBlocks: c.Blocks, ClearedBytes: c.Bytes})
}
