package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"fusion/engine"
	"fusion/engine/runner"
	"fusion/router/metrics"
)

// health serves /health and /metrics.
type health struct {
	engine   engine.Generator
	metrics  *metrics.Metrics
	version  string
	backend  func() runner.BackendStatus // nil: not reported
	draining func() bool                 // nil: never
}

// Health is the answer of GET /health.
type Health struct {
	Status   string   `json:"status"`
	Version  string   `json:"version"`
	Engines  []string `json:"engines"`
	MXMemory Memory   `json:"mx_memory"`
	// Backend is the compute backend models run on, and why (MLX
	// unavailable, auto's choice); mx_memory is MLX's counters when MLX
	// serves.
	Backend *runner.BackendStatus `json:"backend,omitempty"`
	// Draining is true while the node is drained (fusion cluster drain):
	// it finishes what it runs and its peers route nothing new to it.
	Draining bool `json:"draining,omitempty"`
}

// Memory is mx_memory: human-readable figures as the contract shows them,
// and the same in bytes.
type Memory struct {
	Active      string `json:"active"`
	Cached      string `json:"cached"`
	Peak        string `json:"peak"`
	ActiveBytes int64  `json:"active_bytes"`
	CachedBytes int64  `json:"cached_bytes"`
	PeakBytes   int64  `json:"peak_bytes"`
}

// GET /health: never behind the API key. engines lists the loaded models.
// GET /health?ready is 503 while the node drains.
func (h *health) health(w http.ResponseWriter, r *http.Request) {
	out := Health{Status: "ok", Version: h.version, Engines: []string{}}
	models, err := h.engine.Models(r.Context())
	if err != nil {
		out.Status = "degraded"
	}
	for _, m := range models {
		if m.Loaded {
			out.Engines = append(out.Engines, m.ID)
		}
	}
	s := h.metrics.Engine()
	out.MXMemory = Memory{
		Active: HumanBytes(s.ActiveBytes), Cached: HumanBytes(s.CachedBytes), Peak: HumanBytes(s.PeakBytes),
		ActiveBytes: s.ActiveBytes, CachedBytes: s.CachedBytes, PeakBytes: s.PeakBytes,
	}
	if h.backend != nil {
		b := h.backend()
		out.Backend = &b
	}
	out.Draining = h.draining != nil && h.draining()
	if _, ready := r.URL.Query()["ready"]; ready && out.Draining {
		// A readiness probe: take this node out of a load balancer. The
		// plain /health stays 200 (a service manager's liveness check
		// must not restart a node for draining).
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	writeJSON(w, out)
}

// metricsHandler serves GET /metrics: the contract's JSON, or Prometheus
// text when the client asks for text/plain (or OpenMetrics) in Accept or
// gives ?format=prometheus.
func (h *health) metricsHandler() http.HandlerFunc {
	prom := promhttp.HandlerFor(h.metrics.Registry(), promhttp.HandlerOpts{})
	return func(w http.ResponseWriter, r *http.Request) {
		if wantsPrometheus(r) {
			prom.ServeHTTP(w, r)
			return
		}
		writeJSON(w, h.metrics.Snapshot())
	}
}

func wantsPrometheus(r *http.Request) bool {
	switch r.URL.Query().Get("format") {
	case "prometheus", "text":
		return true
	case "json":
		return false
	}
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "text/plain") || strings.Contains(accept, "application/openmetrics-text")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// HumanBytes writes n in binary units with one decimal, as MLX tools do:
// "512 B", "2.5 GB" (GB meaning GiB).
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	units := []string{"KB", "MB", "GB", "TB", "PB"}
	for f /= unit; f >= unit && i < len(units)-1; f /= unit {
		i++
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
