package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/node"
)

// serverBenchLevel is one concurrency level: the same requests through
// HTTP and straight to the engine.
type serverBenchLevel struct {
	Concurrency int            `json:"concurrency"`
	HTTP        latencyFigures `json:"http"`
	Engine      latencyFigures `json:"engine"`
}

// latencyFigures summarise the requests of one side of a level.
type latencyFigures struct {
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	PerSecond float64 `json:"requests_per_s"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
}

// serverBenchStream is the streamed-chunks figure of a concurrency.
type serverBenchStream struct {
	Concurrency           int     `json:"concurrency"`
	TokensPerRequest      int     `json:"tokens_per_request"`
	HTTPChunksPerSecond   float64 `json:"http_chunks_per_s"`
	EngineEventsPerSecond float64 `json:"engine_events_per_s"`
	Errors                int     `json:"errors"`
}

type serverBenchResult struct {
	Model     string              `json:"model"`
	Procs     int                 `json:"gomaxprocs"`
	MaxTokens int                 `json:"max_tokens"`
	Duration  string              `json:"duration_per_level"`
	Levels    []serverBenchLevel  `json:"levels"`
	Stream    []serverBenchStream `json:"stream"`
	Cancel    cancelFigures       `json:"cancel"`
}

// cancelFigures: how long after a streaming client hangs up the engine has
// stopped generating (its in-flight count is back to 0).
type cancelFigures struct {
	Trials int     `json:"trials"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// ServerOptions are the settings of the HTTP server benchmark.
type ServerOptions struct {
	Duration     time.Duration // time spent on each side of each level
	Concurrency  []int         // client counts
	StreamTokens int           // tokens per streamed request
	Version      string        // the version the node reports
}

// DefaultServerOptions are the settings `make bench` uses.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{Duration: 2 * time.Second, Concurrency: []int{1, 8, 64}, StreamTokens: 128}
}

// Server measures the HTTP node against its own engine in the same
// run: requests/s and p50/p99 latency of max_tokens 1 chat completions at
// several concurrencies, and streamed chunks/s, on a tiny demo model.
func Server(ctx context.Context, o ServerOptions, stdout io.Writer) error {
	conc := o.Concurrency
	if len(conc) == 0 || slices.Min(conc) < 1 {
		return optionErrorf("-concurrency: want positive integers, got %v", conc)
	}

	dir, err := os.MkdirTemp("", "fusion-bench-server-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := demo.DefaultOptions()
	if _, err := demo.Create(filepath.Join(dir, "models", "demo"), opts); err != nil {
		return err
	}
	n, err := node.New(node.Config{
		Listen: "127.0.0.1:0", DataDir: dir, ModelsDir: filepath.Join(dir, "models"), Preload: []string{"demo"},
		MaxQueued: 2 * slices.Max(conc), Version: o.Version, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	n.Start()
	defer func() { _ = n.Stop(context.Background()) }()

	b := &serverBench{
		url: n.URL(), engine: n.Runner(),
		// Not http.DefaultTransport: it keeps 2 idle connections per host.
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * slices.Max(conc), MaxConnsPerHost: 0}},
	}
	if b.noEOS, err = b.eosBias(ctx); err != nil {
		return err
	}
	res := serverBenchResult{
		Model:     fmt.Sprintf("demo %s, %d layers, hidden %d", opts.Arch, opts.Layers, opts.Hidden),
		MaxTokens: 1, Duration: o.Duration.String(), Procs: runtime.GOMAXPROCS(0),
	}
	for _, c := range conc {
		lvl := serverBenchLevel{Concurrency: c}
		lvl.HTTP = measure(ctx, c, o.Duration, func(ctx context.Context) error { _, err := b.httpChat(ctx, 1, false); return err })
		lvl.Engine = measure(ctx, c, o.Duration, func(ctx context.Context) error { _, err := b.engineChat(ctx, 1); return err })
		res.Levels = append(res.Levels, lvl)
	}
	for _, c := range []int{1, 8} {
		s := serverBenchStream{Concurrency: c, TokensPerRequest: o.StreamTokens}
		var e1, e2 int
		s.HTTPChunksPerSecond, e1 = throughput(ctx, c, o.Duration, func(ctx context.Context) (int, error) { return b.httpChat(ctx, o.StreamTokens, true) })
		s.EngineEventsPerSecond, e2 = throughput(ctx, c, o.Duration, func(ctx context.Context) (int, error) { return b.engineChat(ctx, o.StreamTokens) })
		s.Errors = e1 + e2
		res.Stream = append(res.Stream, s)
	}
	if res.Cancel, err = b.cancelLatency(ctx, n.Runner(), 20); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// cancelLatency starts long streams, hangs up after the first chunks and
// times how long the engine takes to stop.
func (b *serverBench) cancelLatency(ctx context.Context, r *runner.Runner, trials int) (cancelFigures, error) {
	var lat []time.Duration
	for range trials {
		rctx, cancel := context.WithCancel(ctx)
		body, _ := json.Marshal(map[string]any{
			"model": "demo", "messages": []any{map[string]any{"role": "user", "content": benchPrompt}},
			"max_tokens": 4096, "logit_bias": b.noEOS, "stream": true,
		})
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, b.url+"/v1/chat/completions", bytes.NewReader(body))
		if err != nil {
			cancel()
			return cancelFigures{}, err
		}
		resp, err := b.client.Do(req)
		if err != nil {
			cancel()
			return cancelFigures{}, err
		}
		sc := bufio.NewScanner(resp.Body)
		for i := 0; i < 6 && sc.Scan(); i++ {
		}
		start := time.Now()
		cancel()
		resp.Body.Close()
		for r.Stats().InFlight != 0 {
			if time.Since(start) > 10*time.Second {
				return cancelFigures{}, fmt.Errorf("the engine did not stop within 10s of the client hanging up")
			}
			time.Sleep(100 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return cancelFigures{
		Trials: trials, P50ms: round(ms(lat[len(lat)/2])), P99ms: round(ms(lat[len(lat)*99/100])), MaxMs: round(ms(lat[len(lat)-1])),
	}, nil
}

type serverBench struct {
	url    string
	engine engine.Generator
	client *http.Client
	noEOS  map[string]float64
}

// eosBias bans the demo model's end tokens, so every request generates
// exactly max_tokens tokens.
func (b *serverBench) eosBias(ctx context.Context) (map[string]float64, error) {
	bias := map[string]float64{}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		body, _ := json.Marshal(map[string]any{"model": "demo", "prompt": s, "add_special_tokens": false})
		var res struct{ Tokens []int }
		if err := b.post(ctx, "/tokenize", body, &res); err != nil {
			return nil, err
		}
		if len(res.Tokens) != 1 {
			return nil, fmt.Errorf("%q is %d tokens", s, len(res.Tokens))
		}
		bias[strconv.Itoa(res.Tokens[0])] = -100
	}
	return bias, nil
}

func (b *serverBench) post(ctx context.Context, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %d %s", path, resp.StatusCode, msg)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

const benchPrompt = "Write a haiku about the sea."

// httpChat runs one chat completion over HTTP and returns the content
// chunks it streamed (0 when not streamed).
func (b *serverBench) httpChat(ctx context.Context, maxTokens int, stream bool) (int, error) {
	body, _ := json.Marshal(map[string]any{
		"model": "demo", "messages": []any{map[string]any{"role": "user", "content": benchPrompt}},
		"max_tokens": maxTokens, "temperature": 0, "logit_bias": b.noEOS, "stream": stream,
	})
	if !stream {
		return 0, b.post(ctx, "/v1/chat/completions", body, nil)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	chunks := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"role":"assistant"`) {
			chunks++
		}
	}
	return chunks, sc.Err()
}

// engineChat runs the same request on the engine directly and returns the
// events that carried text.
func (b *serverBench) engineChat(ctx context.Context, maxTokens int) (int, error) {
	p := sample.DefaultParams()
	p.Temperature = 0
	p.LogitBias = map[int]float64{}
	for k, v := range b.noEOS {
		id, _ := strconv.Atoi(k)
		p.LogitBias[id] = v
	}
	events, err := b.engine.Generate(ctx, &engine.Request{
		Model: "demo", Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", benchPrompt)},
		Sampling: p, MaxTokens: maxTokens,
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for ev := range events {
		if ev.Err != nil {
			return n, ev.Err
		}
		if ev.Text != "" {
			n++
		}
	}
	return n, nil
}

// measure runs op from c goroutines for d and summarises the latencies.
func measure(ctx context.Context, c int, d time.Duration, op func(context.Context) error) latencyFigures {
	lats, errs, rate := latencies(ctx, c, d, op)
	f := latencyFigures{Requests: len(lats), Errors: errs, PerSecond: rate}
	if len(lats) > 0 {
		f.P50ms = round(ms(lats[len(lats)/2]))
		f.P99ms = round(ms(lats[min(len(lats)-1, len(lats)*99/100)]))
	}
	return f
}

// throughput runs op from c goroutines for d and returns the units it
// reported per second, and the number of failed calls.
func throughput(ctx context.Context, c int, d time.Duration, op func(context.Context) (int, error)) (float64, int) {
	var (
		mu          sync.Mutex
		total, errs int
		wg          sync.WaitGroup
		start       = time.Now()
		end         = start.Add(d)
	)
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				n, err := op(ctx)
				mu.Lock()
				total += n
				if err != nil {
					errs++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return round(float64(total) / time.Since(start).Seconds()), errs
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 2, 64), 64)
	return v
}
