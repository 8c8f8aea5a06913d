// Package admin serves the node's /admin/api routes: models (list, load,
// unload, per-model settings), global settings, stats, logs, the prefix
// cache's probe and clears, the MCP server configuration, background jobs,
// Hugging Face search and downloads, oQ quantization, benchmarks and their
// profiles (501 placeholders where the node gives no implementation). Every route
// means the same on any node of a cluster: a request with ?node=ID runs on
// that node (forwarded over the cluster's gRPC through Peers), one
// without runs on every node that matters and merges the answers. Errors
// answer in the OpenAI shape.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/engine/prefixcache"
	"fusion/engine/prompt"
	"fusion/router/metrics"
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

// Config is what the admin routes need; nil parts leave their routes
// unmounted (404), but for Peers (nil: a lone node) and Store (nil:
// per-model and global settings are not writable, 503).
type Config struct {
	Cache  Cache
	Models Models
	// Self is this node's id; Peers reaches the other nodes (nil alone).
	Self  string
	Peers Peers
	// Store holds the replicated settings.
	Store Store
	// Metrics are this node's frontend counters (nil: no stats routes);
	// Engine gives the engine's live figures for the stats.
	Metrics *metrics.Metrics
	Engine  func() EngineFigures
	// PersistAllTime saves the all-time counters after clear-alltime
	// (nil: not persisted).
	PersistAllTime func(metrics.Counters) error
	// Global describes and changes the node's configuration (nil: no
	// global-settings routes).
	Global Global
	// Logs reads the node's log files (nil: no log routes).
	Logs Logs
	// MCP serves /admin/api/mcp/servers (nil: not mounted);
	// MaxMCPConfigBytes bounds a PUT's body (default
	// DefaultMaxMCPConfigBytes).
	MCP               MCP
	MaxMCPConfigBytes int
	// Cloud serves /admin/api/cloud (nil: not mounted).
	Cloud Cloud
	// Jobs serves /admin/api/jobs and Hub the Hugging Face routes (nil:
	// not mounted; the Hugging Face routes then answer 501).
	Jobs Jobs
	Hub  Hub
	// Placer lets a download go to the nodes a placement takes (nil: a
	// lone node; a download's placement is then refused).
	Placer Placer
	// Quantizer serves POST /admin/api/oq/start (nil, or without Jobs:
	// the route answers 501).
	Quantizer Quantizer
	// Bench serves the benchmark and profile routes (nil, or without
	// Jobs: the benchmark routes answer 501).
	Bench  Bench
	Logger *slog.Logger
	// BenchLimits bound what one benchmark request may ask for (zero
	// fields: the Max* constants).
	BenchLimits BenchLimits
}

// Handler serves the admin routes.
type Handler struct {
	cfg    Config
	cache  Cache
	models Models
	stats  *statsState
	hist   *history
	mux    chi.Router // the routes alone, for forwarded calls (Serve)
}

// New makes the handler.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, cache: cfg.Cache, models: cfg.Models, stats: &statsState{}, hist: &history{}}
	h.mux = chi.NewRouter()
	h.Mount(h.mux)
	return h
}

// Mount adds the routes to r (behind the caller's auth).
func (h *Handler) Mount(r chi.Router) {
	h.mountModels(r)
	h.mountStats(r)
	h.mountGlobal(r)
	h.mountLogs(r)
	h.mountMCP(r)
	h.mountCloud(r)
	h.mountJobs(r)
	h.mountBench(r)
	mountPlaceholders(r, h.cfg.Hub != nil && h.cfg.Jobs != nil, h.cfg.Quantizer != nil && h.cfg.Jobs != nil, h.cfg.Bench != nil && h.cfg.Jobs != nil)
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

// ProbeAnswer is the contract's probe fields plus the node that answered;
// without ?node, Nodes holds every node with the model on disk, the one
// with it loaded (else the first) in the top-level fields.
type ProbeAnswer struct {
	ProbeResponse
	Node  string        `json:"node"`
	Nodes []ProbeAnswer `json:"nodes,omitempty"`
}

func (h *Handler) probe(w http.ResponseWriter, r *http.Request) {
	body, e := readBody(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	var req probeRequest
	// The body was read for forwarding; the dialect's decoder names a
	// field of the wrong type.
	r.Body = io.NopCloser(bytes.NewReader(body))
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
	if h.forwarded(w, r, body) {
		return
	}
	if h.local(r) {
		p, err := h.cache.ProbeCache(r.Context(), model, prompt.Request{Messages: msgs, Tools: tools,
			AddGenerationPrompt: req.AddGenerationPrompt, EnableThinking: req.EnableThinking, ChatTemplateKwargs: req.ChatTemplateKwargs})
		if err != nil {
			if errors.Is(err, engine.ErrModelNotFound) {
				err = openai.ModelNotFound(model)
			}
			openai.WriteError(w, err)
			return
		}
		openai.WriteJSON(w, http.StatusOK, ProbeAnswer{Node: h.cfg.Self, ProbeResponse: ProbeResponse{
			ModelID: model, ModelLoaded: p.ModelLoaded, TotalTokens: p.TotalTokens, BlockSize: p.BlockSize,
			TotalBlocks: p.TotalBlocks, BlocksSSDHot: p.HotBlocks, BlocksSSDDisk: p.DiskBlocks, BlocksCold: p.ColdBlocks,
			SSDHitTokens: p.HitTokens, ColdTokens: p.ColdTokens,
		}})
		return
	}
	// Cluster-wide: every node with the model on disk answers.
	list := h.clusterModels(r.Context())
	i := slices.IndexFunc(list.Data, func(m ModelEntry) bool { return m.ID == model })
	if i < 0 {
		openai.WriteError(w, openai.ModelNotFound(model))
		return
	}
	var out ProbeAnswer
	for _, n := range list.Data[i].Nodes {
		var rep Reply
		var err error
		if n == h.cfg.Self {
			rep, err = h.run(r, n, body)
		} else {
			rep, err = h.cfg.Peers.Forward(r.Context(), n, callOf(r, n, body))
		}
		var a ProbeAnswer
		if err == nil && rep.Status == http.StatusOK {
			err = json.Unmarshal(rep.Body, &a)
		} else if err == nil {
			err = fmt.Errorf("status %d: %s", rep.Status, rep.Body)
		}
		if err != nil {
			h.logWarn("cache probe: a node did not answer", "node", n, "err", err)
			continue
		}
		out.Nodes = append(out.Nodes, a)
		if out.Node == "" || (a.ModelLoaded && !out.ModelLoaded) {
			out.ProbeResponse, out.Node = a.ProbeResponse, a.Node
		}
	}
	if out.Node == "" {
		openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: "server_error", Code: "node_unreachable", Message: "No node with " + model + " answered the probe."})
		return
	}
	openai.WriteJSON(w, http.StatusOK, out)
}

// run serves call on this node through the handler itself (?node set to
// node, so it answers alone) and records the answer.
func (h *Handler) run(r *http.Request, node string, body []byte) (Reply, error) {
	return h.Serve(r.Context(), callOf(r, node, body))
}

// ClearResponse is the answer of the clear routes.
type ClearResponse struct {
	Status        string `json:"status"`
	ClearedBlocks int    `json:"cleared_blocks"`
	ClearedBytes  int64  `json:"cleared_bytes"`
	// Nodes are the nodes cleared, with what each cleared (without ?node:
	// every live node; the top-level figures are their sum).
	Nodes map[string]ClearResponse `json:"nodes,omitempty"`
}

func (h *Handler) clearSSD(w http.ResponseWriter, r *http.Request) {
	h.clear(w, r, h.cache.ClearSSDCache)
}

func (h *Handler) clearHot(w http.ResponseWriter, r *http.Request) {
	h.clear(w, r, h.cache.ClearHotCache)
}

func (h *Handler) clear(w http.ResponseWriter, r *http.Request, f func(context.Context) (prefixcache.Cleared, error)) {
	if h.forwarded(w, r, nil) {
		return
	}
	c, err := f(r.Context())
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	own := ClearResponse{Status: "ok", ClearedBlocks: c.Blocks, ClearedBytes: c.Bytes}
	out := own
	out.Nodes = map[string]ClearResponse{h.cfg.Self: own}
	if !h.local(r) {
		for _, a := range h.each(r.Context(), http.MethodPost, r.URL.Path, nil, nil) {
			var cr ClearResponse
			if a.err == nil {
				a.err = json.Unmarshal(a.body, &cr)
			}
			if a.err != nil {
				openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: "server_error", Code: "node_unreachable",
					Message: "Node " + a.node + " was not cleared: " + a.err.Error()})
				return
			}
			cr.Nodes = nil
			out.Nodes[a.node] = cr
			out.ClearedBlocks += cr.ClearedBlocks
			out.ClearedBytes += cr.ClearedBytes
		}
	}
	openai.WriteJSON(w, http.StatusOK, out)
}
