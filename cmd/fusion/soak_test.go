package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// soakSample is one reading of a node process.
type soakSample struct {
	at         time.Duration // since the soak began
	rss        int64         // bytes (VmRSS)
	goroutines int
	models     int // loaded, from /health
}

// soakLife is one process of a node, from start to stop.
type soakLife struct {
	Node            string  `json:"node"`
	StartS          float64 `json:"start_s"`
	ServingS        float64 `json:"serving_s"` // back in the clients' pool (the warm-up counts from here)
	SettledS        float64 `json:"settled_s"` // the warm-up's end: no sample of the next two minutes 2% above it
	EndS            float64 `json:"end_s"`
	RSSBaseline     int64   `json:"rss_baseline_bytes"` // first sample after the warm-up
	RSSMax          int64   `json:"rss_max_bytes"`      // after the warm-up
	RSSEnd          int64   `json:"rss_end_bytes"`
	RSSGrowthPct    float64 `json:"rss_growth_pct"`      // (max - baseline) / baseline
	GoroutinesStart int     `json:"goroutines_baseline"` // median over the first minute after the warm-up
	GoroutinesMax   int     `json:"goroutines_max"`
	GoroutinesEnd   int     `json:"goroutines_end"` // median over the last minute
	Judged          bool    `json:"judged"`         // lived long enough past the warm-up to judge
	// Samples are [seconds since the soak began, RSS MiB, goroutines].
	Samples [][3]float64 `json:"samples"`
	samples []soakSample
}

// soakSummary is make soak's JSON document.
type soakSummary struct {
	DurationS      float64        `json:"duration_s"`
	RestartEveryS  float64        `json:"restart_every_s"`
	WarmupS        float64        `json:"warmup_s"`
	Restarts       int            `json:"restarts"`
	Requests       map[string]int `json:"requests"`         // by kind: chat, agent, embed
	Failed         map[string]int `json:"failed"`           // by kind, outside restart windows
	FailedInWindow map[string]int `json:"failed_in_window"` // by kind, inside them
	Retried        map[string]int `json:"retried"`          // by kind: retries after a 429/503 with Retry-After (at most 2 a request)
	Lives          []*soakLife    `json:"lives"`
	MaxRSSGrowth   float64        `json:"max_rss_growth_pct"`
	// SteadyRSSSpread is (max - min) / min of the judged processes' RSS
	// at their end: the level every process of every node settles at.
	SteadyRSSSpread float64 `json:"steady_rss_spread_pct"`
	MaxGoroutineUp  int     `json:"max_goroutine_growth"`
	Pass            bool    `json:"pass"`
}

// TestSoak is make soak (not in make test; FUSION_SOAK=1 runs it): three
// fusion processes under mixed load — chat completions (plain and
// streamed), agent sessions (OpenClaw turns) and embeddings — from
// clients of every node, one node restarted every SOAK_RESTART_EVERY
// (default 5 min, at most a quarter of the run so a short run still
// restarts each node once) by drain, SIGTERM, start, undrain, for
// SOAK_DURATION (default 30m). Every process is sampled every 5 s (RSS
// from /proc, goroutines from its /metrics). A fresh process's RSS climbs
// for a few minutes as its models load and its caches fill (how long
// depends on the load it gets), then holds: its warm-up ends at the first
// sample, once it serves with its three models loaded (--preload;
// /health), after which no sample of the next two minutes is 2% above
// it, and
// must end within SOAK_WARMUP (default 4 min, or half the restart
// interval) — a process that never settles fails. After it, RSS must stay
// within 10% of that sample, and the goroutines' level (the median over
// the last minute) within 10% (+10) of their level in the first minute. No request
// may fail outside a restart window (from the drain to 2 s after the
// undrain); the clients retry a 429/503 with Retry-After at most twice,
// as the official SDKs do, and the summary counts those retries. The JSON summary goes to stdout after "SOAK "
// and to SOAK_OUT when set.
func TestSoak(t *testing.T) {
	if os.Getenv("FUSION_SOAK") != "1" {
		t.Skip("the soak runs under make soak (FUSION_SOAK=1)")
	}
	dur := envDuration(t, "SOAK_DURATION", 30*time.Minute)
	every := envDuration(t, "SOAK_RESTART_EVERY", min(5*time.Minute, dur/4))
	warm := envDuration(t, "SOAK_WARMUP", max(4*time.Minute, every/2))

	dir := t.TempDir()
	models := nodetest.Models(t)
	if err := os.Symlink(testenv.EmbeddingModelDir(t, "all-minilm-l6-v2"), filepath.Join(models, "minilm")); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.Create(filepath.Join(models, "other"), demo.DefaultOptions()); err != nil {
		t.Fatal(err)
	}
	bin := buildFusion(t, dir, "fusion", "soak", "")
	began := time.Now()
	// Every process loads every model at start, so what it holds does not
	// depend on where the first requests happened to go.
	nodes := startProcCluster(t, dir, bin, func(int) string { return models }, "--drain-timeout", "20s", "--preload", "demo,other,minilm")
	var (
		mu    sync.Mutex
		lives []*soakLife
		cur   = map[string]*soakLife{}
	)
	// newLife records a process of n started now.
	newLife := func(n *procNode) {
		now := time.Since(began).Seconds()
		l := &soakLife{Node: n.id, StartS: now, ServingS: now}
		mu.Lock()
		lives = append(lives, l)
		cur[n.id] = l
		mu.Unlock()
	}
	for _, n := range nodes {
		newLife(n)
	}
	waitAll := func(what string, ok func(*procNode) bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			all := true
			for _, n := range nodes {
				all = all && ok(n)
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	threeVoters := func(n *procNode) bool {
		doc, err := n.status()
		if err != nil || doc.Leader == "" {
			return false
		}
		v := 0
		for _, m := range doc.Members {
			if m.Voter && m.Status == "alive" {
				v++
			}
		}
		return v == 3
	}
	waitAll("three voters", threeVoters)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// Sampling.
	var sampleWG sync.WaitGroup
	sampleWG.Add(1)
	go func() {
		defer sampleWG.Done()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			for _, n := range nodes {
				mu.Lock()
				l, cmd := cur[n.id], n.cmd
				mu.Unlock()
				if l == nil || cmd == nil || cmd.Process == nil {
					continue
				}
				rss, err1 := procRSS(cmd.Process.Pid)
				g, err2 := nodeGoroutines(n.http)
				m, err3 := nodeLoaded(n.http)
				if err1 != nil || err2 != nil || err3 != nil {
					continue // stopping or starting
				}
				mu.Lock()
				if cur[n.id] == l {
					l.samples = append(l.samples, soakSample{at: time.Since(began), rss: rss, goroutines: g, models: m})
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// The load: clients over the nodes in service, as a load balancer's
	// pool (a node leaves it once drained, and comes back once undrained).
	type result struct {
		kind       string
		start, end time.Time
		err        error
	}
	var (
		poolMu  sync.Mutex
		pool    = map[string]*procNode{"p1": nodes[0], "p2": nodes[1], "p3": nodes[2]}
		resMu   sync.Mutex
		results []result
		retried = map[string]int{}
		windows [][2]time.Time
		loadWG  sync.WaitGroup
	)
	pick := func(rng *rand.Rand) *procNode {
		poolMu.Lock()
		defer poolMu.Unlock()
		ids := make([]string, 0, len(pool))
		for id := range pool {
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			return nodes[0]
		}
		slices.Sort(ids)
		return pool[ids[rng.IntN(len(ids))]]
	}
	client := &http.Client{Timeout: 60 * time.Second}
	kinds := []string{"chat", "chat", "agent", "embed"}
	for c, kind := range kinds {
		loadWG.Add(1)
		go func() {
			defer loadWG.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			sc := &soakClient{c: client}
			defer func() {
				resMu.Lock()
				retried[kind] += sc.retries
				resMu.Unlock()
			}()
			for i := 0; ctx.Err() == nil; i++ {
				start := time.Now()
				var err error
				switch kind {
				case "chat":
					err = soakChat(sc, pick(rng).http, i%2 == 1, []string{"demo", "other"}[i%2])
				case "agent":
					err = soakAgent(sc, pick(rng).http, pick(rng).http)
				case "embed":
					err = soakEmbed(sc, pick(rng).http, i)
				}
				if ctx.Err() != nil && err != nil {
					return // stopped mid-request
				}
				resMu.Lock()
				results = append(results, result{kind: kind, start: start, end: time.Now(), err: err})
				resMu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}

	// Restarts, one node at a time, every interval.
	restarts := 0
	tick := time.NewTicker(every)
	deadline := time.After(dur)
loop:
	for k := 0; ; k++ {
		select {
		case <-deadline:
			break loop
		case <-tick.C:
		}
		n := nodes[k%3]
		other := nodes[(k+1)%3]
		w0 := time.Now()
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"cluster", "drain", "--addr", other.http, "--api-key", "key", "--timeout", "2m", n.id}, &out, &errb); code != 0 {
			t.Fatalf("drain %s: %s%s", n.id, out.String(), errb.String())
		}
		poolMu.Lock()
		delete(pool, n.id)
		poolMu.Unlock()
		time.Sleep(200 * time.Millisecond)
		n.cmd.Process.Signal(syscall.SIGTERM)
		if err := n.cmd.Wait(); err != nil {
			t.Errorf("%s exit: %v", n.id, err)
		}
		mu.Lock()
		cur[n.id].EndS = time.Since(began).Seconds()
		cur[n.id] = nil
		mu.Unlock()
		n.start(t)
		newLife(n)
		waitAll(n.id+" back", threeVoters)
		if code := run(context.Background(), []string{"cluster", "undrain", "--addr", other.http, "--api-key", "key", n.id}, &out, &errb); code != 0 {
			t.Fatalf("undrain %s: %s%s", n.id, out.String(), errb.String())
		}
		for dl := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, _ := rawCall(t, http.MethodGet, n.http+"/health?ready", "")
			if code == http.StatusOK {
				break
			}
			if time.Now().After(dl) {
				t.Fatalf("%s not ready after undrain", n.id)
			}
		}
		poolMu.Lock()
		pool[n.id] = n
		poolMu.Unlock()
		mu.Lock()
		cur[n.id].ServingS = time.Since(began).Seconds()
		mu.Unlock()
		restarts++
		resMu.Lock()
		windows = append(windows, [2]time.Time{w0, time.Now().Add(2 * time.Second)})
		resMu.Unlock()
		t.Logf("restart %d: %s in %v", restarts, n.id, time.Since(w0).Round(time.Millisecond))
	}
	tick.Stop()
	stop()
	loadWG.Wait()
	sampleWG.Wait()
	end := time.Since(began).Seconds()

	sum := soakSummary{DurationS: dur.Seconds(), RestartEveryS: every.Seconds(), WarmupS: warm.Seconds(), Restarts: restarts,
		Requests: map[string]int{}, Failed: map[string]int{}, FailedInWindow: map[string]int{}, Retried: retried, Lives: lives, Pass: true}
	for _, r := range results {
		sum.Requests[r.kind]++
		if r.err == nil {
			continue
		}
		in := false
		for _, w := range windows {
			in = in || !r.end.Before(w[0]) && !r.start.After(w[1])
		}
		if in {
			sum.FailedInWindow[r.kind]++
		} else {
			sum.Failed[r.kind]++
			sum.Pass = false
			t.Errorf("%s failed at %.1fs outside the restart windows: %v", r.kind, r.start.Sub(began).Seconds(), r.err)
		}
	}
	var steadyMin, steadyMax int64
	for _, l := range lives {
		if l.EndS == 0 {
			l.EndS = end
		}
		var after []soakSample
		for i, s := range l.samples {
			l.Samples = append(l.Samples, [3]float64{math.Round(s.at.Seconds()), math.Round(float64(s.rss)/(1<<20)*10) / 10, float64(s.goroutines)})
			if after == nil && s.at.Seconds() >= l.ServingS && s.models == soakModels && settledAt(l.samples, i) {
				after = l.samples[i:]
				l.SettledS = s.at.Seconds()
			}
		}
		switch {
		case after == nil && l.EndS-l.ServingS >= warm.Seconds()+30:
			sum.Pass = false
			t.Errorf("%s (from %.0fs): RSS never settled (all models loaded, within 2%% for two minutes) in %.0fs of service", l.Node, l.StartS, l.EndS-l.ServingS)
			continue
		case after == nil:
			continue // too short a life to tell
		case l.SettledS-l.ServingS > warm.Seconds():
			sum.Pass = false
			t.Errorf("%s (from %.0fs): RSS settled only %.0fs after it served (SOAK_WARMUP %v)", l.Node, l.StartS, l.SettledS-l.ServingS, warm)
		}
		l.RSSBaseline, l.RSSEnd = after[0].rss, after[len(after)-1].rss
		l.GoroutinesStart, l.GoroutinesEnd = goroutineLevel(after[:min(len(after), soakLevel)]), goroutineLevel(after[max(0, len(after)-soakLevel):])
		for _, s := range after {
			l.RSSMax, l.GoroutinesMax = max(l.RSSMax, s.rss), max(l.GoroutinesMax, s.goroutines)
		}
		l.RSSGrowthPct = 100 * float64(l.RSSMax-l.RSSBaseline) / float64(l.RSSBaseline)
		l.Judged = len(after) > soakSettle+soakLevel
		if !l.Judged {
			continue
		}
		if steadyMin == 0 || l.RSSEnd < steadyMin {
			steadyMin = l.RSSEnd
		}
		steadyMax = max(steadyMax, l.RSSEnd)
		sum.MaxRSSGrowth = max(sum.MaxRSSGrowth, l.RSSGrowthPct)
		sum.MaxGoroutineUp = max(sum.MaxGoroutineUp, l.GoroutinesEnd-l.GoroutinesStart)
		if l.RSSGrowthPct > 10 {
			sum.Pass = false
			t.Errorf("%s (from %.0fs): RSS grew %.1f%% after the warm-up (%d → max %d bytes)", l.Node, l.StartS, l.RSSGrowthPct, l.RSSBaseline, l.RSSMax)
		}
		if l.GoroutinesEnd > l.GoroutinesStart+l.GoroutinesStart/10+10 {
			sum.Pass = false
			t.Errorf("%s (from %.0fs): goroutines grew from a median of %d in the first minute after the warm-up to %d in the last (max %d)", l.Node, l.StartS, l.GoroutinesStart, l.GoroutinesEnd, l.GoroutinesMax)
		}
	}
	if steadyMin > 0 {
		sum.SteadyRSSSpread = 100 * float64(steadyMax-steadyMin) / float64(steadyMin)
	}
	if sum.Requests["chat"] == 0 || sum.Requests["agent"] == 0 || sum.Requests["embed"] == 0 {
		sum.Pass = false
		t.Errorf("a kind of load sent nothing: %v", sum.Requests)
	}
	doc, _ := json.Marshal(sum)
	fmt.Printf("SOAK %s\n", doc)
	if out := os.Getenv("SOAK_OUT"); out != "" {
		if err := os.WriteFile(out, append(doc, '\n'), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, n := range nodes {
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range nodes {
		n.cmd.Wait()
	}
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q is not a positive duration", key, v)
	}
	return d
}

// procRSS is a process's resident set (Linux /proc).
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

// soakModels is how many models the soak's load uses (demo, other,
// minilm).
const soakModels = 3

// nodeLoaded is how many models a node has loaded (/health's engines).
func nodeLoaded(base string) (int, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/health")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var h struct {
		Engines []string `json:"engines"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return 0, err
	}
	return len(h.Engines), nil
}

// soakSettle is the settling window in samples (5 s apart): two minutes.
// soakLevel is the run of samples the goroutines' level is the median
// of: one minute.
const (
	soakSettle = 24
	soakLevel  = 12
)

// settledAt reports whether RSS holds from sample i on: no sample of the
// next two minutes is more than 2% above it. (One sample 30 s later was
// not enough, nor one minute: a process can sit on a plateau for over a
// minute under load and then take its last step as its caches fill.)
func settledAt(samples []soakSample, i int) bool {
	if i+soakSettle >= len(samples) {
		return false
	}
	for _, s := range samples[i+1 : i+soakSettle+1] {
		if s.rss*100 > samples[i].rss*102 {
			return false
		}
	}
	return true
}

// goroutineLevel is the median goroutine count of a run of samples: the
// level a process holds, not the requests in flight at one instant (a
// burst of streams adds a few goroutines each for as long as they run).
func goroutineLevel(samples []soakSample) int {
	g := make([]int, len(samples))
	for i, s := range samples {
		g[i] = s.goroutines
	}
	slices.Sort(g)
	return g[len(g)/2]
}

// nodeGoroutines reads go_goroutines from a node's Prometheus metrics.
func nodeGoroutines(base string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics?format=prometheus", nil)
	req.Header.Set("Authorization", "Bearer key")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no go_goroutines at %s", base)
}

// soakClient is one load loop's client. It retries as the official
// OpenAI and Anthropic SDKs do by default for the answers a server marks
// retryable — a 429 or 503 with Retry-After (e.g. a write while the
// cluster elects a leader) — at most twice, after the time asked (capped
// at 5 s), and counts the retries: a request fails only when the client
// a user runs would have given up.
type soakClient struct {
	c       *http.Client
	retries int
}

const soakMaxRetries = 2

// post sends body to url with the key and returns the answer.
func (sc *soakClient) post(method, url string, body any) ([]byte, error) {
	var payload []byte
	if body != nil {
		payload, _ = json.Marshal(body)
	}
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequest(method, url, bytes.NewReader(payload))
		req.Header.Set("Authorization", "Bearer key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := sc.c.Do(req)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return b, nil
		}
		err = fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(b))
		wait, retry := retryAfter(resp)
		if !retry || attempt == soakMaxRetries {
			return nil, err
		}
		sc.retries++
		time.Sleep(wait)
	}
}

func soakChat(c *soakClient, base string, stream bool, model string) error {
	b, err := c.post(http.MethodPost, base+"/v1/chat/completions", map[string]any{
		"model": model, "messages": []any{map[string]any{"role": "user", "content": "soak"}}, "max_tokens": 16, "stream": stream})
	if err != nil {
		return err
	}
	if stream && !bytes.Contains(b, []byte("data: [DONE]")) {
		return fmt.Errorf("stream without [DONE]: %s", tail(string(b), 200))
	}
	if !stream && !bytes.Contains(b, []byte(`"finish_reason"`)) {
		return fmt.Errorf("no finish_reason: %s", b)
	}
	return nil
}

// soakAgent creates a session on one node, runs two turns on another and
// the first, and deletes it.
func soakAgent(c *soakClient, a, b string) error {
	raw, err := c.post(http.MethodPost, a+"/v1/openclaw/agent/sessions", map[string]any{"model": "demo", "system_prompt": "Be brief."})
	if err != nil {
		return err
	}
	var s struct {
		ID string `json:"session_id"`
	}
	if json.Unmarshal(raw, &s) != nil || s.ID == "" {
		return fmt.Errorf("session: %s", raw)
	}
	for _, base := range []string{b, a} {
		if _, err := c.post(http.MethodPost, base+"/v1/openclaw/agent/turns?session_id="+s.ID, map[string]any{
			"messages": []any{map[string]any{"role": "user", "content": "next"}}, "max_tokens": 8}); err != nil {
			return err
		}
	}
	_, err = c.post(http.MethodDelete, b+"/v1/openclaw/agent/sessions/"+s.ID, nil)
	return err
}

func soakEmbed(c *soakClient, base string, i int) error {
	raw, err := c.post(http.MethodPost, base+"/v1/embeddings", map[string]any{
		"model": "minilm", "input": []string{"soak text " + strconv.Itoa(i), "another line"}})
	if err != nil {
		return err
	}
	var doc struct {
		Data []struct{ Embedding []float32 }
	}
	if json.Unmarshal(raw, &doc) != nil || len(doc.Data) != 2 || len(doc.Data[0].Embedding) != 384 {
		return fmt.Errorf("embeddings: %s", tail(string(raw), 200))
	}
	return nil
}
