package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sync"

	"github.com/go-chi/chi/v5"

	"fusion/engine/prefixcache"
	"fusion/router/metrics"
	"fusion/router/openai"
)

// EngineFigures are the engine's live figures for the stats.
type EngineFigures struct {
	Queued      int64
	RAMTotal    int64
	RAMFree     int64
	WeightBytes int64
	KVBytes     int64
	PeakBytes   int64
	PrefixCache prefixcache.Stats
	MLX         *MLXMemory // nil unless MLX serves on this node
}

// MLXMemory are MLX's allocator counters in bytes (process-wide: weights,
// KV and a step's arrays live there; cache is its buffer cache).
type MLXMemory struct {
	Active int64 `json:"active"`
	Peak   int64 `json:"peak"`
	Cache  int64 `json:"cache"`
}

// NodeStats are one node's figures in GET /admin/api/stats.
type NodeStats struct {
	Node         string              `json:"node"`
	Session      metrics.Counters    `json:"session"`
	AllTime      metrics.Counters    `json:"alltime"`
	SessionStart int64               `json:"session_start"`
	Rates        metrics.Rates       `json:"rates"`
	TTFT         metrics.Percentiles `json:"ttft_seconds"`
	Latency      metrics.Percentiles `json:"latency_seconds"`
	Active       int64               `json:"active_requests"`
	Queued       int64               `json:"queued_requests"`
	// CachedTokens are prompt tokens served from the prefix cache this
	// session (blocks hit × block size).
	CachedTokens int64      `json:"cached_tokens"`
	Memory       Memory     `json:"memory"`
	PrefixCache  CacheRates `json:"prefix_cache"`
	// Samples travel only between nodes (?samples=1), so that the
	// cluster total's percentiles are those of every node's samples.
	Samples *LatencySamples `json:"samples,omitempty"`
}

// LatencySamples are a node's kept TTFT and latency samples, in seconds.
type LatencySamples struct {
	TTFT    []float64 `json:"ttft"`
	Latency []float64 `json:"latency"`
}

// Memory are a node's memory figures in bytes.
type Memory struct {
	RAMTotal int64 `json:"ram_total"`
	RAMFree  int64 `json:"ram_free"`
	Weights  int64 `json:"weights"`
	KV       int64 `json:"kv"`
	Peak     int64 `json:"peak"`
	// MLX is set on a node where MLX serves (summed in the total).
	MLX *MLXMemory `json:"mlx,omitempty"`
}

// CacheRates are the prefix cache's lookups this session by tier, and
// each tier's share of them.
type CacheRates struct {
	HotHits    int64   `json:"hot_hits"`
	SSDHits    int64   `json:"ssd_hits"`
	Misses     int64   `json:"misses"`
	HotHitRate float64 `json:"hot_hit_rate"`
	SSDHitRate float64 `json:"ssd_hit_rate"`
	HitRate    float64 `json:"hit_rate"`
}

// StatsAnswer is the answer of GET /admin/api/stats: every node's figures
// and their cluster total (percentiles in the total are those of all the
// nodes' samples together; a node that sent none counts with its own
// percentiles as an upper bound).
type StatsAnswer struct {
	Node        string               `json:"node"` // the node that answered
	Nodes       map[string]NodeStats `json:"nodes"`
	Total       NodeStats            `json:"total"`
	Unreachable map[string]string    `json:"unreachable,omitempty"`
}

// ClearAnswer is the answer of the stats clears.
type ClearAnswer struct {
	Status string   `json:"status"` // "ok"
	Nodes  []string `json:"nodes"`
}

// statsState holds the prefix cache's counters when the session began,
// so the session's cache figures start from zero too.
type statsState struct {
	mu   sync.Mutex
	base prefixcache.Stats
}

func (h *Handler) mountStats(r chi.Router) {
	if h.cfg.Metrics == nil {
		return
	}
	r.Get("/admin/api/stats", h.getStats)
	r.Get("/admin/api/stats/history", h.getHistory)
	r.Post("/admin/api/stats/clear", h.clearStats(false))
	r.Post("/admin/api/stats/clear-alltime", h.clearStats(true))
}

func (h *Handler) engineFigures() EngineFigures {
	if h.cfg.Engine == nil {
		return EngineFigures{}
	}
	return h.cfg.Engine()
}

// localStats are this node's figures.
func (h *Handler) localStats() NodeStats {
	s := h.cfg.Metrics.Stats()
	e := h.engineFigures()
	h.stats.mu.Lock()
	base := h.stats.base
	h.stats.mu.Unlock()
	pc := e.PrefixCache
	c := CacheRates{HotHits: pc.HotHits - base.HotHits, SSDHits: pc.DiskHits - base.DiskHits, Misses: pc.Misses - base.Misses}
	c.rates()
	return NodeStats{Node: h.cfg.Self, Session: s.Session, AllTime: s.AllTime, SessionStart: s.SessionStart, Rates: s.Rates,
		TTFT: s.TTFT, Latency: s.Latency, Active: s.Active, Queued: e.Queued,
		CachedTokens: (c.HotHits + c.SSDHits) * int64(pc.BlockSize),
		Memory:       Memory{RAMTotal: e.RAMTotal, RAMFree: e.RAMFree, Weights: e.WeightBytes, KV: e.KVBytes, Peak: e.PeakBytes, MLX: e.MLX},
		PrefixCache:  c, Samples: &LatencySamples{TTFT: s.TTFTSamples, Latency: s.LatencySamples}}
}

func (c *CacheRates) rates() {
	if n := c.HotHits + c.SSDHits + c.Misses; n > 0 {
		c.HotHitRate = float64(c.HotHits) / float64(n)
		c.SSDHitRate = float64(c.SSDHits) / float64(n)
		c.HitRate = float64(c.HotHits+c.SSDHits) / float64(n)
	}
}

func (h *Handler) getStats(w http.ResponseWriter, r *http.Request) {
	if h.forwarded(w, r, nil) {
		return
	}
	self := h.localStats()
	out := StatsAnswer{Node: h.cfg.Self, Nodes: map[string]NodeStats{h.cfg.Self: self}}
	if !h.local(r) {
		for _, a := range h.each(r.Context(), http.MethodGet, "/admin/api/stats", url.Values{"samples": {"1"}}, nil) {
			var sa StatsAnswer
			if a.err == nil {
				a.err = json.Unmarshal(a.body, &sa)
			}
			ns, ok := sa.Nodes[a.node]
			if a.err != nil || !ok {
				if out.Unreachable == nil {
					out.Unreachable = map[string]string{}
				}
				if a.err == nil {
					a.err = errNoFigures
				}
				out.Unreachable[a.node] = a.err.Error()
				continue
			}
			out.Nodes[a.node] = ns
		}
	}
	out.Total = total(out.Nodes)
	if r.URL.Query().Get("samples") != "1" {
		for id, n := range out.Nodes {
			n.Samples = nil
			out.Nodes[id] = n
		}
	}
	openai.WriteJSON(w, http.StatusOK, out)
}

var errNoFigures = errors.New("the node's answer has no figures of its own")

// total sums the nodes' figures.
func total(nodes map[string]NodeStats) NodeStats {
	t := NodeStats{Node: "total"}
	var ttft, latency []float64
	var ttftBound, latencyBound metrics.Percentiles // nodes without samples
	t.Session.Add(metrics.Counters{})
	t.AllTime.Add(metrics.Counters{})
	for _, n := range nodes {
		t.Session.Add(n.Session)
		t.AllTime.Add(n.AllTime)
		if t.SessionStart == 0 || (n.SessionStart != 0 && n.SessionStart < t.SessionStart) {
			t.SessionStart = n.SessionStart
		}
		t.Rates.Prefill1m += n.Rates.Prefill1m
		t.Rates.Prefill5m += n.Rates.Prefill5m
		t.Rates.Decode1m += n.Rates.Decode1m
		t.Rates.Decode5m += n.Rates.Decode5m
		if n.Samples != nil {
			ttft, latency = append(ttft, n.Samples.TTFT...), append(latency, n.Samples.Latency...)
		} else {
			ttftBound, latencyBound = worst(ttftBound, n.TTFT), worst(latencyBound, n.Latency)
		}
		t.Active += n.Active
		t.Queued += n.Queued
		t.CachedTokens += n.CachedTokens
		t.Memory.RAMTotal += n.Memory.RAMTotal
		t.Memory.RAMFree += n.Memory.RAMFree
		t.Memory.Weights += n.Memory.Weights
		t.Memory.KV += n.Memory.KV
		t.Memory.Peak += n.Memory.Peak
		if m := n.Memory.MLX; m != nil {
			if t.Memory.MLX == nil {
				t.Memory.MLX = &MLXMemory{}
			}
			t.Memory.MLX.Active += m.Active
			t.Memory.MLX.Peak += m.Peak
			t.Memory.MLX.Cache += m.Cache
		}
		t.PrefixCache.HotHits += n.PrefixCache.HotHits
		t.PrefixCache.SSDHits += n.PrefixCache.SSDHits
		t.PrefixCache.Misses += n.PrefixCache.Misses
	}
	t.PrefixCache.rates()
	t.TTFT = worst(metrics.PercentilesOf(ttft), ttftBound)
	t.Latency = worst(metrics.PercentilesOf(latency), latencyBound)
	return t
}

func worst(a, b metrics.Percentiles) metrics.Percentiles {
	return metrics.Percentiles{P50: max(a.P50, b.P50), P95: max(a.P95, b.P95), P99: max(a.P99, b.P99), Samples: a.Samples + b.Samples}
}

// clearStats resets the session (or all-time) counters here and, without
// ?node, on every node.
func (h *Handler) clearStats(alltime bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.forwarded(w, r, nil) {
			return
		}
		if alltime {
			h.cfg.Metrics.ClearAllTime()
			if h.cfg.PersistAllTime != nil {
				if err := h.cfg.PersistAllTime(h.cfg.Metrics.AllTime()); err != nil {
					openai.WriteError(w, err)
					return
				}
			}
		} else {
			h.cfg.Metrics.ClearSession()
			e := h.engineFigures()
			h.stats.mu.Lock()
			h.stats.base = e.PrefixCache
			h.stats.mu.Unlock()
		}
		nodes := []string{h.cfg.Self}
		if !h.local(r) {
			for _, a := range h.each(r.Context(), http.MethodPost, r.URL.Path, nil, nil) {
				if a.err != nil {
					openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: "server_error", Code: "node_unreachable",
						Message: "Node " + a.node + " was not cleared: " + a.err.Error()})
					return
				}
				nodes = append(nodes, a.node)
			}
		}
		openai.WriteJSON(w, http.StatusOK, ClearAnswer{Status: "ok", Nodes: nodes})
	}
}
