// Package metrics counts what a node's HTTP frontend serves: requests by
// route and status, generations by model and outcome, tokens, latencies
// and time to first token. It keeps the contract's JSON figures and a
// per-node Prometheus registry (never the global default one).
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"fusion/engine/prefixcache"
)

// EngineStats are the live figures of the local engine.
type EngineStats struct {
	InFlight    int64 // admitted generations not yet finished
	QueueDepth  int64 // generations waiting for their turn
	Cancelled   int64 // generations stopped because their client went away
	ActiveBytes int64 // memory in use (weights and KV cache)
	CachedBytes int64 // memory held for reuse but not in use
	PeakBytes   int64 // highest ActiveBytes seen
	// PrefixCache are the prefix cache's sizes and counters.
	PrefixCache prefixcache.Stats
	// Drafted and Accepted count speculative decoding's tokens: proposed
	// by drafts, and kept by the models.
	Drafted, Accepted int64
}

// Outcome is how a generation request ended.
type Outcome string

// Outcomes.
const (
	OK        Outcome = "ok"
	Failed    Outcome = "error"
	Cancelled Outcome = "cancelled"
)

// Metrics is safe for concurrent use.
type Metrics struct {
	reg    *prometheus.Registry
	engine func() EngineStats
	start  time.Time

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	httpInFlight prometheus.Gauge
	generations  *prometheus.CounterVec
	active       prometheus.Gauge
	promptTokens *prometheus.CounterVec
	genTokens    *prometheus.CounterVec
	ttft         *prometheus.HistogramVec
	genDuration  *prometheus.HistogramVec

	mu       sync.Mutex
	total    int64
	ok       int64
	failed   int64
	cancel   int64
	prompt   int64
	gen      int64
	inFlight int64
	models   map[string]*ModelStats

	// The admin API's stats (stats.go), under mu.
	session, alltime  Counters
	sessionStart      time.Time
	events            []event
	latency, ttftRing ring
}

// ModelStats are the per-model figures of the JSON metrics.
type ModelStats struct {
	Requests        int64 `json:"requests"`
	Failed          int64 `json:"failed_requests"`
	Cancelled       int64 `json:"cancelled_requests"`
	TokensGenerated int64 `json:"tokens_generated"`
	TokensPrompt    int64 `json:"tokens_prompt"`
}

// New returns metrics with a fresh registry. engine, when not nil, gives
// the engine's live figures (exported as gauges and in the JSON).
func New(engine func() EngineStats) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), engine: engine, start: time.Now(), models: map[string]*ModelStats{},
		session: newCounters(), alltime: newCounters(), sessionStart: time.Now()}
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fusion_http_requests_total", Help: "HTTP requests by route, method and status code.",
	}, []string{"route", "method", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fusion_http_request_duration_seconds", Help: "HTTP request latency by route (to the end of the answer).", Buckets: latency,
	}, []string{"route", "method"})
	m.httpInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fusion_http_requests_in_flight", Help: "HTTP requests being served.",
	})
	m.generations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fusion_generation_requests_total", Help: "Generation requests by model and outcome (ok, error, cancelled).",
	}, []string{"model", "outcome"})
	m.active = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fusion_generation_requests_active", Help: "Generation requests admitted and not finished.",
	})
	m.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fusion_prompt_tokens_total", Help: "Prompt tokens processed, by model.",
	}, []string{"model"})
	m.genTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fusion_generated_tokens_total", Help: "Tokens generated, by model.",
	}, []string{"model"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fusion_time_to_first_token_seconds", Help: "Time from admission to the first generated text, by model.", Buckets: latency,
	}, []string{"model"})
	m.genDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fusion_generation_duration_seconds", Help: "Time from admission to the end of a generation, by model.", Buckets: latency,
	}, []string{"model"})
	m.reg.MustRegister(m.httpRequests, m.httpDuration, m.httpInFlight, m.generations, m.active,
		m.promptTokens, m.genTokens, m.ttft, m.genDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if engine != nil {
		gauge := func(name, help string, f func(EngineStats) int64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(engine())) })
		}
		counter := func(name, help string, f func(EngineStats) int64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(engine())) })
		}
		m.reg.MustRegister(
			gauge("fusion_engine_in_flight", "Generations admitted by the engine and not finished.", func(s EngineStats) int64 { return s.InFlight }),
			gauge("fusion_engine_queue_depth", "Generations waiting for their turn in the engine.", func(s EngineStats) int64 { return s.QueueDepth }),
			counter("fusion_engine_cancelled_total", "Generations the engine stopped because their client went away.", func(s EngineStats) int64 { return s.Cancelled }),
			gauge("fusion_engine_memory_active_bytes", "Engine memory in use (weights and KV cache).", func(s EngineStats) int64 { return s.ActiveBytes }),
			gauge("fusion_engine_memory_peak_bytes", "Highest engine memory in use seen.", func(s EngineStats) int64 { return s.PeakBytes }),
			gauge("fusion_prefix_cache_hot_bytes", "Prefix cache RAM tier size.", func(s EngineStats) int64 { return s.PrefixCache.HotBytes }),
			gauge("fusion_prefix_cache_ssd_bytes", "Prefix cache SSD tier size.", func(s EngineStats) int64 { return s.PrefixCache.DiskBytes }),
			counter("fusion_prefix_cache_hot_hits_total", "Prefix cache blocks served from RAM.", func(s EngineStats) int64 { return s.PrefixCache.HotHits }),
			counter("fusion_prefix_cache_ssd_hits_total", "Prefix cache blocks served from the SSD.", func(s EngineStats) int64 { return s.PrefixCache.DiskHits }),
			counter("fusion_prefix_cache_misses_total", "Prefix cache lookups that found nothing.", func(s EngineStats) int64 { return s.PrefixCache.Misses }),
			counter("fusion_prefix_cache_write_dropped_total", "Prefix cache blocks not written to the SSD: write queue full.", func(s EngineStats) int64 { return s.PrefixCache.Dropped }),
			counter("fusion_prefix_cache_write_errors_total", "Prefix cache block files that failed to write.", func(s EngineStats) int64 { return s.PrefixCache.WriteErrors }),
			counter("fusion_prefix_cache_corrupt_total", "Bad prefix cache block files found and removed.", func(s EngineStats) int64 { return s.PrefixCache.Corrupt }),
			counter("fusion_speculative_drafted_tokens_total", "Tokens speculative decoding drafted (backend_override rapid).", func(s EngineStats) int64 { return s.Drafted }),
			counter("fusion_speculative_accepted_tokens_total", "Drafted tokens the models accepted.", func(s EngineStats) int64 { return s.Accepted }),
		)
	}
	return m
}

// Registry is the node's Prometheus registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Engine returns the engine's live figures (zero without an engine).
func (m *Metrics) Engine() EngineStats {
	if m.engine == nil {
		return EngineStats{}
	}
	return m.engine()
}

// HTTPStart counts a request coming in; call HTTPDone when it is answered.
func (m *Metrics) HTTPStart() { m.httpInFlight.Inc() }

// HTTPDone counts an answered request.
func (m *Metrics) HTTPDone(route, method, code string, d time.Duration) {
	m.httpInFlight.Dec()
	m.httpRequests.WithLabelValues(route, method, code).Inc()
	m.httpDuration.WithLabelValues(route, method).Observe(d.Seconds())
	m.recordStatus(route, code)
}

// Rejected counts a generation request refused before it reached a model
// (a bad field, an unknown model, a full queue).
func (m *Metrics) Rejected() {
	m.mu.Lock()
	m.total++
	m.failed++
	m.session.count("", "", false, 0, 0)
	m.alltime.count("", "", false, 0, 0)
	m.mu.Unlock()
	m.generations.WithLabelValues("", string(Failed)).Inc()
}

// Begin counts a generation request admitted for model.
func (m *Metrics) Begin(model string) *Generation {
	m.mu.Lock()
	m.inFlight++
	m.mu.Unlock()
	m.active.Inc()
	return &Generation{m: m, model: model, start: time.Now()}
}

type keyCtx struct{}

// keyOf is the API key a request was made with, as the auth middleware
// puts it in the request's context.
type keyOf struct {
	id   string
	sink func(int64)
}

// WithKey returns ctx naming the sub-key id the request was made with:
// BeginFor's generation counts under it in the per-key stats and calls
// sink (when not nil) with its prompt + generated tokens when it ends (a
// sub-key's token limit counts them).
func WithKey(ctx context.Context, id string, sink func(tokens int64)) context.Context {
	return context.WithValue(ctx, keyCtx{}, keyOf{id, sink})
}

// BeginFor is Begin for the request of ctx: counted under its key, and
// its token sink hears the generation's tokens.
func (m *Metrics) BeginFor(ctx context.Context, model string) *Generation {
	g := m.Begin(model)
	if k, ok := ctx.Value(keyCtx{}).(keyOf); ok {
		g.SetKey(k.id)
		g.sink = k.sink
	}
	return g
}

// Generation is one admitted generation request (all its choices). It is
// used by the one goroutine that serves the request.
type Generation struct {
	m     *Metrics
	model string
	start time.Time
	first bool
	ended bool
	key   string      // the API key's id (SetKey), for the per-key stats
	sink  func(int64) // nil: none
}

// FirstToken records the time to the first generated text (once).
func (g *Generation) FirstToken() {
	if g.first {
		return
	}
	g.first = true
	d := time.Since(g.start).Seconds()
	g.m.ttft.WithLabelValues(g.model).Observe(d)
	g.m.mu.Lock()
	g.m.ttftRing.add(d)
	g.m.mu.Unlock()
}

// End records how the request ended and its tokens. Later calls do nothing.
func (g *Generation) End(o Outcome, promptTokens, generated int) {
	if g.ended {
		return
	}
	g.ended = true
	if g.sink != nil {
		g.sink(int64(promptTokens) + int64(generated))
	}
	m := g.m
	m.active.Dec()
	m.generations.WithLabelValues(g.model, string(o)).Inc()
	m.promptTokens.WithLabelValues(g.model).Add(float64(promptTokens))
	m.genTokens.WithLabelValues(g.model).Add(float64(generated))
	m.genDuration.WithLabelValues(g.model).Observe(time.Since(g.start).Seconds())

	m.mu.Lock()
	defer m.mu.Unlock()
	m.inFlight--
	m.total++
	ms := m.models[g.model]
	if ms == nil {
		ms = &ModelStats{}
		m.models[g.model] = ms
	}
	ms.Requests++
	switch o {
	case OK:
		m.ok++
	case Cancelled:
		m.failed++
		m.cancel++
		ms.Failed++
		ms.Cancelled++
	default:
		m.failed++
		ms.Failed++
	}
	m.prompt += int64(promptTokens)
	m.gen += int64(generated)
	m.recordEnd(g, o == OK, int64(promptTokens), int64(generated), time.Now())
	ms.TokensPrompt += int64(promptTokens)
	ms.TokensGenerated += int64(generated)
}

// Snapshot is the JSON of GET /metrics: the contract's figures, plus
// cancelled requests, the engine's live figures and the uptime.
type Snapshot struct {
	TotalRequests        int64                 `json:"total_requests"`
	SuccessfulRequests   int64                 `json:"successful_requests"`
	FailedRequests       int64                 `json:"failed_requests"`
	CancelledRequests    int64                 `json:"cancelled_requests"`
	TotalTokensGenerated int64                 `json:"total_tokens_generated"`
	TotalTokensPrompt    int64                 `json:"total_tokens_prompt"`
	ActiveRequests       int64                 `json:"active_requests"`
	ModelStats           map[string]ModelStats `json:"model_stats"`
	Engine               EngineSnapshot        `json:"engine"`
	UptimeSeconds        float64               `json:"uptime_seconds"`
}

// EngineSnapshot is the engine part of Snapshot.
type EngineSnapshot struct {
	InFlight   int64 `json:"in_flight"`
	QueueDepth int64 `json:"queue_depth"`
	Cancelled  int64 `json:"cancelled"`
	// PrefixCache: sizes, caps, hits, misses, drops, errors, bad files.
	PrefixCache prefixcache.Stats `json:"prefix_cache"`
	// Speculative: tokens drafted and accepted (backend_override rapid).
	Speculative SpeculativeSnapshot `json:"speculative"`
}

// SpeculativeSnapshot counts speculative decoding's tokens.
type SpeculativeSnapshot struct {
	Drafted  int64 `json:"drafted"`
	Accepted int64 `json:"accepted"`
}

// Snapshot returns the JSON figures.
func (m *Metrics) Snapshot() Snapshot {
	e := m.Engine()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{
		TotalRequests: m.total, SuccessfulRequests: m.ok, FailedRequests: m.failed, CancelledRequests: m.cancel,
		TotalTokensGenerated: m.gen, TotalTokensPrompt: m.prompt, ActiveRequests: m.inFlight,
		ModelStats: make(map[string]ModelStats, len(m.models)),
		Engine: EngineSnapshot{InFlight: e.InFlight, QueueDepth: e.QueueDepth, Cancelled: e.Cancelled, PrefixCache: e.PrefixCache,
			Speculative: SpeculativeSnapshot{Drafted: e.Drafted, Accepted: e.Accepted}},
		UptimeSeconds: time.Since(m.start).Seconds(),
	}
	for n, ms := range m.models {
		s.ModelStats[n] = *ms
	}
	return s
}
