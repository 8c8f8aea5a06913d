package metrics

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Counters are the admin API's request counters over one period: since
// the last POST /admin/api/stats/clear (session) or since the last
// clear-alltime (all time, persisted by the node).
type Counters struct {
	Requests       int64                     `json:"requests"`
	Succeeded      int64                     `json:"successful_requests"`
	Failed         int64                     `json:"failed_requests"`
	FailedByStatus map[string]int64          `json:"failed_by_status"`
	TokensIn       int64                     `json:"tokens_in"`
	TokensOut      int64                     `json:"tokens_out"`
	Models         map[string]*GroupCounters `json:"models"`
	// Keys counts per API key id; the auth middleware names the key of a
	// generation with Generation.SetKey (empty without sub-keys).
	Keys map[string]*GroupCounters `json:"keys"`
}

// GroupCounters are the counters of one model or one API key.
type GroupCounters struct {
	Requests  int64 `json:"requests"`
	Failed    int64 `json:"failed_requests"`
	TokensIn  int64 `json:"tokens_in"`
	TokensOut int64 `json:"tokens_out"`
}

func newCounters() Counters {
	return Counters{FailedByStatus: map[string]int64{}, Models: map[string]*GroupCounters{}, Keys: map[string]*GroupCounters{}}
}

// clone deep-copies c (maps never nil).
func (c Counters) clone() Counters {
	out := c
	out.FailedByStatus = make(map[string]int64, len(c.FailedByStatus))
	for k, v := range c.FailedByStatus {
		out.FailedByStatus[k] = v
	}
	out.Models, out.Keys = cloneGroups(c.Models), cloneGroups(c.Keys)
	return out
}

func cloneGroups(m map[string]*GroupCounters) map[string]*GroupCounters {
	out := make(map[string]*GroupCounters, len(m))
	for k, v := range m {
		g := *v
		out[k] = &g
	}
	return out
}

// Add adds o to c (used to sum nodes into a cluster total).
func (c *Counters) Add(o Counters) {
	if c.FailedByStatus == nil || c.Models == nil || c.Keys == nil {
		e := newCounters()
		addGroups(e.Models, c.Models)
		addGroups(e.Keys, c.Keys)
		for k, v := range c.FailedByStatus {
			e.FailedByStatus[k] = v
		}
		c.FailedByStatus, c.Models, c.Keys = e.FailedByStatus, e.Models, e.Keys
	}
	c.Requests += o.Requests
	c.Succeeded += o.Succeeded
	c.Failed += o.Failed
	c.TokensIn += o.TokensIn
	c.TokensOut += o.TokensOut
	for k, v := range o.FailedByStatus {
		c.FailedByStatus[k] += v
	}
	addGroups(c.Models, o.Models)
	addGroups(c.Keys, o.Keys)
}

func addGroups(dst, src map[string]*GroupCounters) {
	for k, v := range src {
		g := dst[k]
		if g == nil {
			g = &GroupCounters{}
			dst[k] = g
		}
		g.Requests += v.Requests
		g.Failed += v.Failed
		g.TokensIn += v.TokensIn
		g.TokensOut += v.TokensOut
	}
}

// count records one finished generation request in c.
func (c *Counters) count(model, key string, ok bool, in, out int64) {
	c.Requests++
	if ok {
		c.Succeeded++
	} else {
		c.Failed++
	}
	c.TokensIn += in
	c.TokensOut += out
	for _, g := range []struct {
		m    map[string]*GroupCounters
		name string
	}{{c.Models, model}, {c.Keys, key}} {
		if g.name == "" {
			continue
		}
		gc := g.m[g.name]
		if gc == nil {
			gc = &GroupCounters{}
			g.m[g.name] = gc
		}
		gc.Requests++
		if !ok {
			gc.Failed++
		}
		gc.TokensIn += in
		gc.TokensOut += out
	}
}

// Limits of the stats' memory.
const (
	latencySamples = 4096    // latencies and TTFTs kept for percentiles
	windowEvents   = 100_000 // finished generations kept for the rates
	rateWindowLong = 5 * time.Minute
)

// event is one finished generation, for the token rates.
type event struct {
	at      time.Time
	in, out int64
}

// ring keeps the last latencySamples durations.
type ring struct {
	vals []float64
	next int
}

func (r *ring) add(v float64) {
	if len(r.vals) < latencySamples {
		r.vals = append(r.vals, v)
		return
	}
	r.vals[r.next] = v
	r.next = (r.next + 1) % latencySamples
}

// Percentiles are p50/p95/p99 in seconds (nearest rank; zero without samples).
type Percentiles struct {
	P50     float64 `json:"p50"`
	P95     float64 `json:"p95"`
	P99     float64 `json:"p99"`
	Samples int     `json:"samples"`
}

func (r *ring) percentiles() Percentiles { return PercentilesOf(r.vals) }

// PercentilesOf are the percentiles of samples (which it does not change):
// how a cluster total merges its nodes' samples exactly.
func PercentilesOf(samples []float64) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Percentiles{P50: at(.50), P95: at(.95), P99: at(.99), Samples: len(s)}
}

// Rates are tokens per second over the last minute and five minutes
// (tokens of the generations that ended in the window over the window's
// length, or over the time since the session began when that is
// shorter).
type Rates struct {
	Prefill1m float64 `json:"prefill_tokens_per_second_1m"`
	Prefill5m float64 `json:"prefill_tokens_per_second_5m"`
	Decode1m  float64 `json:"decode_tokens_per_second_1m"`
	Decode5m  float64 `json:"decode_tokens_per_second_5m"`
}

// StatsSnapshot are the admin API's figures of this node's frontend.
type StatsSnapshot struct {
	Session      Counters    `json:"session"`
	AllTime      Counters    `json:"alltime"`
	SessionStart int64       `json:"session_start"` // unix seconds
	Rates        Rates       `json:"rates"`
	TTFT         Percentiles `json:"ttft_seconds"`
	Latency      Percentiles `json:"latency_seconds"`
	Active       int64       `json:"active_requests"`
	// TTFTSamples and LatencySamples are the kept samples (at most 4096
	// each, in no order) the percentiles come from.
	TTFTSamples    []float64 `json:"-"`
	LatencySamples []float64 `json:"-"`
}

// recordEnd counts a finished generation in the admin stats (under m.mu).
func (m *Metrics) recordEnd(g *Generation, ok bool, in, out int64, now time.Time) {
	m.session.count(g.model, g.key, ok, in, out)
	m.alltime.count(g.model, g.key, ok, in, out)
	m.latency.add(now.Sub(g.start).Seconds())
	if len(m.events) >= windowEvents {
		m.events = m.events[1:]
	}
	m.events = append(m.events, event{at: now, in: in, out: out})
}

// recordStatus counts an HTTP failure of a generation route by status.
func (m *Metrics) recordStatus(route, code string) {
	c, err := strconv.Atoi(code)
	if err != nil || c < 400 || !strings.HasPrefix(route, "/v1/") {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.session.FailedByStatus[code]++
	m.alltime.FailedByStatus[code]++
}

// Stats returns the admin API's figures.
func (m *Metrics) Stats() StatsSnapshot {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	// Forget events older than the long window.
	cut := 0
	for cut < len(m.events) && now.Sub(m.events[cut].at) > rateWindowLong {
		cut++
	}
	m.events = m.events[cut:]
	rate := func(w time.Duration) (in, out float64) {
		var ti, to int64
		for _, e := range m.events {
			if now.Sub(e.at) <= w {
				ti += e.in
				to += e.out
			}
		}
		secs := min(w, now.Sub(m.sessionStart)).Seconds()
		if secs <= 0 {
			return 0, 0
		}
		return float64(ti) / secs, float64(to) / secs
	}
	var r Rates
	r.Prefill1m, r.Decode1m = rate(time.Minute)
	r.Prefill5m, r.Decode5m = rate(rateWindowLong)
	return StatsSnapshot{
		Session: m.session.clone(), AllTime: m.alltime.clone(), SessionStart: m.sessionStart.Unix(),
		Rates: r, TTFT: m.ttftRing.percentiles(), Latency: m.latency.percentiles(), Active: m.inFlight,
		TTFTSamples: slices.Clone(m.ttftRing.vals), LatencySamples: slices.Clone(m.latency.vals),
	}
}

// ClearSession resets the session counters, rates and percentiles.
func (m *Metrics) ClearSession() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.session, m.events, m.latency, m.ttftRing, m.sessionStart = newCounters(), nil, ring{}, ring{}, time.Now()
}

// ClearAllTime resets the all-time counters.
func (m *Metrics) ClearAllTime() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alltime = newCounters()
}

// AllTime returns the all-time counters (for the node to persist).
func (m *Metrics) AllTime() Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.alltime.clone()
}

// RestoreAllTime replaces the all-time counters with persisted ones.
func (m *Metrics) RestoreAllTime(c Counters) {
	n := newCounters()
	n.Add(c)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alltime = n
}

// SetKey names the API key a generation was made with, for the per-key
// counters (the auth middleware's key id).
func (g *Generation) SetKey(id string) { g.key = id }
