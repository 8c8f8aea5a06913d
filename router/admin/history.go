package admin

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"fusion/router/openai"
)

// History sizes: a point every HistoryEvery (the node records them) for
// the last hour.
const (
	HistoryEvery  = 10 * time.Second
	historyPoints = int(time.Hour / HistoryEvery)
)

// HistoryPoint is one node's figures at one time, for the panel's charts
// over the last hour.
type HistoryPoint struct {
	Time           int64   `json:"t"` // unix seconds
	Requests       int64   `json:"requests"`
	RequestsPerSec float64 `json:"requests_per_second"`
	DecodePerSec   float64 `json:"decode_tokens_per_second"`
	PrefillPerSec  float64 `json:"prefill_tokens_per_second"`
	TTFTP50        float64 `json:"ttft_p50"`
	TTFTP95        float64 `json:"ttft_p95"`
	RAMUsed        int64   `json:"ram_used"`
	KV             int64   `json:"kv"`
	ActiveRequests int64   `json:"active_requests"`
	QueuedRequests int64   `json:"queued_requests"`
}

// HistoryAnswer is the answer of GET /admin/api/stats/history: each node's
// points, oldest first.
type HistoryAnswer struct {
	Node         string                    `json:"node"`
	EverySeconds float64                   `json:"every_seconds"`
	Nodes        map[string][]HistoryPoint `json:"nodes"`
	Unreachable  map[string]string         `json:"unreachable,omitempty"`
}

// history is a node's ring of points.
type history struct {
	mu     sync.Mutex
	points []HistoryPoint
}

// RecordHistory adds a point of this node's figures at now (the node
// calls it every HistoryEvery; a session clear restarts the request rate
// from zero, never negative).
func (h *Handler) RecordHistory(now time.Time) {
	if h.cfg.Metrics == nil {
		return
	}
	s := h.localStats()
	p := HistoryPoint{Time: now.Unix(), Requests: s.Session.Requests, DecodePerSec: s.Rates.Decode1m, PrefillPerSec: s.Rates.Prefill1m,
		TTFTP50: s.TTFT.P50, TTFTP95: s.TTFT.P95, RAMUsed: s.Memory.RAMTotal - s.Memory.RAMFree, KV: s.Memory.KV,
		ActiveRequests: s.Active, QueuedRequests: s.Queued}
	h.hist.mu.Lock()
	defer h.hist.mu.Unlock()
	if n := len(h.hist.points); n > 0 {
		prev := h.hist.points[n-1]
		if dt := float64(p.Time - prev.Time); dt > 0 && p.Requests >= prev.Requests {
			p.RequestsPerSec = float64(p.Requests-prev.Requests) / dt
		}
	}
	if len(h.hist.points) == historyPoints {
		h.hist.points = append(h.hist.points[:0], h.hist.points[1:]...)
	}
	h.hist.points = append(h.hist.points, p)
}

func (h *Handler) getHistory(w http.ResponseWriter, r *http.Request) {
	if h.forwarded(w, r, nil) {
		return
	}
	h.hist.mu.Lock()
	self := append([]HistoryPoint{}, h.hist.points...)
	h.hist.mu.Unlock()
	out := HistoryAnswer{Node: h.cfg.Self, EverySeconds: HistoryEvery.Seconds(), Nodes: map[string][]HistoryPoint{h.cfg.Self: self}}
	if !h.local(r) {
		for _, a := range h.each(r.Context(), http.MethodGet, "/admin/api/stats/history", nil, nil) {
			var ha HistoryAnswer
			if a.err == nil {
				a.err = json.Unmarshal(a.body, &ha)
			}
			pts, ok := ha.Nodes[a.node]
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
			out.Nodes[a.node] = pts
		}
	}
	openai.WriteJSON(w, http.StatusOK, out)
}
