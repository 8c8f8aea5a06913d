package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/prompt"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/router"
	"fusion/router/dispatch"
)

// forwardBenchLevel is one concurrency level: the same requests straight
// to the node that has the model, and through a node that forwards them.
type forwardBenchLevel struct {
	Concurrency int            `json:"concurrency"`
	Direct      latencyFigures `json:"direct"`
	Forwarded   latencyFigures `json:"forwarded"`
	AddedP50ms  float64        `json:"added_p50_ms"`
	AddedP99ms  float64        `json:"added_p99_ms"`
}

type forwardBenchResult struct {
	Model    string `json:"model"`
	Procs    int    `json:"gomaxprocs"`
	Duration string `json:"duration_per_side"`
	// HTTP: max_tokens 1 chat completions over HTTP to the serving node vs
	// to a frontend that forwards them over gRPC (both nodes in this
	// process, on loopback).
	HTTP []forwardBenchLevel `json:"http"`
	// RPC: a trivial engine (one final event, no model) called directly
	// vs through the Engine gRPC service: the cost of the hop itself.
	RPC []rpcBenchLevel `json:"rpc"`
}

// rpcBenchLevel is the hop alone, in microseconds.
type rpcBenchLevel struct {
	Concurrency        int     `json:"concurrency"`
	DirectPerSecond    float64 `json:"direct_requests_per_s"`
	ForwardedPerSecond float64 `json:"forwarded_requests_per_s"`
	ForwardedErrors    int     `json:"forwarded_errors"`
	// The direct call takes well under a microsecond, so the forwarded
	// latency is the added latency.
	AddedP50us float64 `json:"added_p50_us"`
	AddedP99us float64 `json:"added_p99_us"`
}

// ForwardOptions are the settings of the forwarding benchmark.
type ForwardOptions struct {
	Duration    time.Duration // time spent on each side of each level
	Concurrency []int         // client counts
	Version     string        // the version the nodes report
}

// DefaultForwardOptions are the settings `make bench` uses.
func DefaultForwardOptions() ForwardOptions {
	return ForwardOptions{Duration: 2 * time.Second, Concurrency: []int{1, 8, 32}}
}

// Forward measures what forwarding to a peer adds: p50/p99 latency
// and max requests/s, direct vs forwarded, in the same run.
func Forward(ctx context.Context, o ForwardOptions, stdout io.Writer) error {
	conc := o.Concurrency
	if len(conc) == 0 || slices.Min(conc) < 1 {
		return optionErrorf("-concurrency: want positive integers, got %v", conc)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	dir, err := os.MkdirTemp("", "fusion-bench-forward-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := demo.DefaultOptions()
	if _, err := demo.Create(filepath.Join(dir, "models", "demo"), opts); err != nil {
		return err
	}
	run, err := runner.New(runner.Config{ModelsDir: filepath.Join(dir, "models"), Preload: []string{"demo"},
		MaxQueued: 2 * slices.Max(conc), Logger: quiet})
	if err != nil {
		return err
	}
	defer run.Close()
	empty, err := runner.New(runner.Config{ModelsDir: filepath.Join(dir, "none"), Logger: quiet})
	if err != nil {
		return err
	}
	defer empty.Close()

	// Node B has the model: its Engine service and its HTTP frontend.
	srvB, err := remote.Listen("127.0.0.1:0", remote.ServerConfig{NodeID: "b", Engine: run, Logger: quiet})
	if err != nil {
		return err
	}
	srvB.Serve()
	defer srvB.Stop(context.Background())
	httpB := httptest.NewServer(router.New(router.Config{Engine: run, Logger: quiet, Version: o.Version}))
	defer httpB.Close()
	// Node A has no model: its frontend forwards to B.
	pool := remote.NewPool()
	defer pool.Close()
	tbl := staticTable{self: "a", ready: []dispatch.Peer{{ID: "b", Addr: srvB.Addr(), Alive: true}}}
	disp := dispatch.New(dispatch.Config{Local: empty, Table: tbl, Connect: pool, Logger: quiet})
	httpA := httptest.NewServer(router.New(router.Config{Engine: disp, Logger: quiet, Version: o.Version}))
	defer httpA.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * slices.Max(conc)}}
	body := []byte(`{"model":"demo","messages":[{"role":"user","content":"` + benchPrompt + `"}],"max_tokens":1,"temperature":0}`)
	call := func(url string) func(context.Context) error {
		b := &serverBench{url: url, client: client}
		return func(ctx context.Context) error { return b.post(ctx, "/v1/chat/completions", body, nil) }
	}
	// Warm both paths (model pages, connections).
	for _, u := range []string{httpB.URL, httpA.URL} {
		if err := call(u)(ctx); err != nil {
			return fmt.Errorf("warm-up %s: %w", u, err)
		}
	}

	// The trivial engine, direct and over gRPC.
	srvT, err := remote.Listen("127.0.0.1:0", remote.ServerConfig{NodeID: "t", Engine: trivialEngine{}, Logger: quiet})
	if err != nil {
		return err
	}
	srvT.Serve()
	defer srvT.Stop(context.Background())
	clientT, err := remote.Dial(srvT.Addr())
	if err != nil {
		return err
	}
	defer clientT.Close()
	gen := func(g engine.Generator) func(context.Context) error {
		req := &engine.Request{Model: "demo", Sampling: sample.DefaultParams(),
			Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", benchPrompt)}}
		return func(ctx context.Context) error {
			ch, err := g.Generate(ctx, req)
			if err != nil {
				return err
			}
			for ev := range ch {
				if ev.Err != nil {
					return ev.Err
				}
			}
			return nil
		}
	}

	res := forwardBenchResult{
		Model:    fmt.Sprintf("demo %s, %d layers, hidden %d", opts.Arch, opts.Layers, opts.Hidden),
		Procs:    runtime.GOMAXPROCS(0),
		Duration: o.Duration.String(),
	}
	level := func(c int, direct, fwd func(context.Context) error) forwardBenchLevel {
		l := forwardBenchLevel{Concurrency: c}
		l.Direct = measure(ctx, c, o.Duration, direct)
		l.Forwarded = measure(ctx, c, o.Duration, fwd)
		l.AddedP50ms = round(l.Forwarded.P50ms - l.Direct.P50ms)
		l.AddedP99ms = round(l.Forwarded.P99ms - l.Direct.P99ms)
		return l
	}
	for _, c := range conc {
		res.HTTP = append(res.HTTP, level(c, call(httpB.URL), call(httpA.URL)))
		direct := measure(ctx, c, o.Duration, gen(trivialEngine{}))
		lats, errs, rate := latencies(ctx, c, o.Duration, gen(clientT))
		if len(lats) == 0 {
			lats = []time.Duration{0}
		}
		res.RPC = append(res.RPC, rpcBenchLevel{
			Concurrency: c, DirectPerSecond: direct.PerSecond, ForwardedPerSecond: rate, ForwardedErrors: errs,
			AddedP50us: round(us(lats[len(lats)/2])), AddedP99us: round(us(lats[min(len(lats)-1, len(lats)*99/100)])),
		})
	}
	return json.NewEncoder(stdout).Encode(res)
}

// latencies runs op from c goroutines for d and returns the sorted
// latencies of the calls that worked, the failures and their rate.
func latencies(ctx context.Context, c int, d time.Duration, op func(context.Context) error) ([]time.Duration, int, float64) {
	var (
		mu    sync.Mutex
		lats  []time.Duration
		errs  int
		wg    sync.WaitGroup
		start = time.Now()
		end   = start.Add(d)
	)
	for range c {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				err := op(ctx)
				lat := time.Since(t0)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					lats = append(lats, lat)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(lats)
	return lats, errs, round(float64(len(lats)) / time.Since(start).Seconds())
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// staticTable is a routing table that never changes.
type staticTable struct {
	self  string
	ready []dispatch.Peer
}

func (t staticTable) Self() string                      { return t.self }
func (t staticTable) Candidates(string) []dispatch.Peer { return t.ready }
func (t staticTable) Known(string) bool                 { return true }
func (t staticTable) Unheard() []dispatch.Peer          { return nil }
func (t staticTable) Peers() []dispatch.Peer            { return t.ready }

// trivialEngine answers every request with one final event at once.
type trivialEngine struct{}

func (trivialEngine) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	ch := make(chan engine.Event, 2)
	ch <- engine.Event{Text: "x"}
	ch <- engine.Event{Done: true, FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 1, CompletionTokens: 1}}
	close(ch)
	return ch, nil
}
func (trivialEngine) Models(context.Context) ([]engine.ModelInfo, error) { return nil, nil }
func (trivialEngine) Tokenize(context.Context, string, prompt.Request) (prompt.Result, error) {
	return prompt.Result{}, nil
}
func (trivialEngine) Detokenize(context.Context, string, []int) (string, error) { return "", nil }
