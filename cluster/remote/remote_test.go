package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"fusion/cluster/enginepb"
	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/engine/prompt"
	"fusion/engine/runner"
	"fusion/engine/sample"
	"fusion/router/openai"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRunner starts the real engine over a fresh demo model "demo".
func newRunner(t testing.TB, cfg runner.Config) *runner.Runner {
	t.Helper()
	dir := t.TempDir()
	demotest.Create(t, filepath.Join(dir, "demo"), demo.Options{Arch: "qwen3", Seed: 7}) // built once per test binary
	cfg.ModelsDir, cfg.Threads, cfg.Logger = dir, 1, quiet
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// serve starts the Engine service over gen on a loopback port and returns
// a client of it.
func serve(t testing.TB, id string, gen engine.Generator, stats func() remote.Stats) (*remote.Server, *remote.Client) {
	t.Helper()
	srv, err := remote.Listen("127.0.0.1:0", remote.ServerConfig{NodeID: id, Engine: gen, Stats: stats, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	c, err := remote.Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func chat(text string, maxTokens int) *engine.Request {
	p := sample.DefaultParams()
	p.Temperature = 0
	return &engine.Request{
		Model:     "demo",
		Messages:  []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", text)},
		Sampling:  p,
		MaxTokens: maxTokens,
	}
}

func drain(t testing.TB, ch <-chan engine.Event) []engine.Event {
	t.Helper()
	var evs []engine.Event
	for ev := range ch {
		evs = append(evs, ev)
	}
	return evs
}

// watched wraps a Generator and records when each generation's own
// channel closed, i.e. when the engine really stopped.
type watched struct {
	engine.Generator
	mu      sync.Mutex
	stopped []time.Time
	done    chan struct{} // one value per finished generation
}

func newWatched(g engine.Generator) *watched {
	return &watched{Generator: g, done: make(chan struct{}, 64)}
}

func (w *watched) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	in, err := w.Generator.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make(chan engine.Event)
	go func() {
		defer close(out)
		for ev := range in {
			select {
			case out <- ev:
			case <-ctx.Done():
				for range in {
				}
				w.finish()
				return
			}
		}
		w.finish()
	}()
	return out, nil
}

func (w *watched) finish() {
	w.mu.Lock()
	w.stopped = append(w.stopped, time.Now())
	w.mu.Unlock()
	w.done <- struct{}{}
}

func TestRequestRoundTrip(t *testing.T) {
	seed := int64(-3)
	think := false
	text := "raw"
	tests := map[string]*engine.Request{
		"chat": {
			ID: "req-1", Model: "m",
			Messages: []*chattemplate.Object{
				chattemplate.NewObject("role", "system", "content", "be brief"),
				chattemplate.NewObject("role", "user", "content", "hi", "weight", 1.0, "n", int64(3),
					"nested", chattemplate.NewObject("z", "first", "a", []any{true, nil, 2.5})),
			},
			Tools:              []*chattemplate.Object{chattemplate.NewObject("type", "function", "function", chattemplate.NewObject("name", "f"))},
			EnableThinking:     &think,
			ChatTemplateKwargs: map[string]any{"x": "y", "n": 2.0},
			Sampling: sample.Params{Temperature: 0.7, TopK: 40, TopP: 0.9, MinP: 0.05, RepetitionPenalty: 1.1, RepetitionWindow: 64,
				PresencePenalty: 0.5, FrequencyPenalty: -0.5, LogitBias: map[int]float64{5: -100, 7: 3}, Seed: &seed,
				StopTokenIDs: []int{1, 2}, Logprobs: true, TopLogprobs: 5},
			MaxTokens: 77, Stop: []string{"\n\n", "END"},
			ResponseFormat: &engine.ResponseFormat{Schema: []byte(`{"type":"object"}`)},
			Priority:       engine.PriorityRealtime,
			ToolChoice:     engine.ToolChoice{Mode: engine.ToolNamed, Name: "f", NoParallel: true},
			ContinueFinal:  true, ReasoningBudget: 128, StartThinking: true, Speculative: true,
		},
		"prompt":       {Model: "m", Prompt: &text, Sampling: sample.DefaultParams(), ResponseFormat: &engine.ResponseFormat{}},
		"token ids":    {Model: "m", PromptTokens: []int{1, 2, 3}, Sampling: sample.DefaultParams(), Priority: engine.PriorityBackground},
		"empty tokens": {Model: "m", PromptTokens: []int{}, Sampling: sample.DefaultParams()},
		"empty msgs":   {Model: "m", Messages: []*chattemplate.Object{}, Sampling: sample.DefaultParams()},
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := remote.RequestToPB(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := remote.RequestFromPB(p)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, req) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, req)
			}
			// Message key order and value types survive.
			if len(req.Messages) > 0 {
				a, _ := req.Messages[len(req.Messages)-1].MarshalJSON()
				b, _ := got.Messages[len(got.Messages)-1].MarshalJSON()
				if string(a) != string(b) {
					t.Errorf("message JSON %s, want %s", b, a)
				}
			}
		})
	}
}

func TestEventRoundTrip(t *testing.T) {
	tests := []engine.Event{
		{Text: "hé", Reasoning: "hm", Tokens: []engine.TokenLogprob{{ID: 3, Text: "h", Logprob: -0.25}},
			TopLogprobs: [][]engine.TokenLogprob{{{ID: 3, Text: "h", Logprob: -0.25}, {ID: 9, Text: "x", Logprob: -2}}}},
		{ToolCalls: []engine.ToolCall{{Index: 1, ID: "call_1", Name: "f", Arguments: `{"a":1}`, Undeclared: true}}},
		{Done: true, FinishReason: engine.FinishStop, StopSequence: "END", Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 7, CachedTokens: 2, CacheWriteTokens: 3, DraftedTokens: 8, AcceptedTokens: 6}},
	}
	for i, ev := range tests {
		if got := remote.EventFromPB(remote.EventToPB(ev)); !reflect.DeepEqual(got, ev) {
			t.Errorf("%d: got %#v\nwant %#v", i, got, ev)
		}
	}
}

// TestForwardedEqualsDirect: greedy generation, tokenization and model
// listing give the same answers through the service as from the engine.
func TestForwardedEqualsDirect(t *testing.T) {
	r := newRunner(t, runner.Config{})
	_, c := serve(t, "peer-1", r, nil)
	ctx := context.Background()

	req := chat("Tell me a story", 24)
	req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 2
	direct, err := r.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := drain(t, direct)
	node, fwd, err := c.GenerateOn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, fwd)
	if node != "peer-1" {
		t.Errorf("served by %q, want peer-1", node)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("forwarded events differ:\n got %+v\nwant %+v", got, want)
	}
	if last := got[len(got)-1]; !last.Done || last.Usage.CompletionTokens != 24 {
		t.Errorf("last event %+v", last)
	}

	// StartThinking travels too: the demo template is a hybrid one.
	preq := prompt.Request{Messages: req.Messages, StartThinking: true}
	wantTok, err := r.Tokenize(ctx, "demo", preq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(wantTok.Prompt, "<think>\n") {
		t.Fatalf("prompt %q does not open the thinking", wantTok.Prompt)
	}
	gotTok, err := c.Tokenize(ctx, "demo", preq)
	if err != nil || !reflect.DeepEqual(gotTok, wantTok) {
		t.Errorf("tokenize: %+v, %v; want %+v", gotTok, err, wantTok)
	}
	n, err := c.CountTokens(ctx, "demo", preq)
	if err != nil || n != wantTok.Count {
		t.Errorf("count tokens: %d, %v; want %d", n, err, wantTok.Count)
	}
	text, err := c.Detokenize(ctx, "demo", wantTok.Tokens)
	if err != nil || text != wantTok.Prompt {
		t.Errorf("detokenize: %q, %v; want %q", text, err, wantTok.Prompt)
	}
	// So does ContinueFinal: counting a request that continues the
	// assistant's last message renders it unclosed, on either node.
	cont := prompt.Request{Messages: append(slices.Clone(req.Messages), chattemplate.NewObject("role", "assistant", "content", "The answer is")), ContinueFinal: true}
	wantCont, err := r.Tokenize(ctx, "demo", cont)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(wantCont.Prompt, "The answer is") {
		t.Fatalf("continued prompt %q does not end in the assistant's text", wantCont.Prompt)
	}
	if gotCont, err := c.Tokenize(ctx, "demo", cont); err != nil || !reflect.DeepEqual(gotCont, wantCont) {
		t.Errorf("tokenize with continue_final forwarded: %+v, %v; want %+v", gotCont, err, wantCont)
	}
	wantModels, _ := r.Models(ctx)
	gotModels, err := c.Models(ctx)
	if err != nil || !reflect.DeepEqual(gotModels, wantModels) {
		t.Errorf("models: %+v, %v; want %+v", gotModels, err, wantModels)
	}
}

// TestErrorsKeepTheirStatus: every refusal maps to the same OpenAI error
// (status, code, param, message) through the service as locally.
func TestErrorsKeepTheirStatus(t *testing.T) {
	r := newRunner(t, runner.Config{MaxTokens: 100, MaxQueued: 1})
	w := newWatched(r)
	_, c := serve(t, "peer-1", w, nil)
	ctx := context.Background()

	unknown := chat("hi", 1)
	unknown.Model = "nope"
	overMax := chat("hi", 101)
	badTopP := chat("hi", 1)
	badTopP.Sampling.TopP = 2
	tooLong := chat(strings.Repeat("word ", 50000), 1)
	badSchema := chat("hi", 5)
	badSchema.ResponseFormat = &engine.ResponseFormat{Schema: []byte(`{"type":"object","patternProperties":{"a":{}}}`)}
	tests := map[string]struct {
		req    *engine.Request
		status int
	}{
		"unknown model": {unknown, 404},
		"max_tokens":    {overMax, 400},
		"top_p":         {badTopP, 400},
		"context":       {tooLong, 400},
		"schema":        {badSchema, 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, lerr := r.Generate(ctx, tc.req)
			_, rerr := c.Generate(ctx, tc.req)
			if lerr == nil || rerr == nil {
				t.Fatalf("local %v, remote %v: want both to fail", lerr, rerr)
			}
			le, re := openai.FromEngine(lerr), openai.FromEngine(rerr)
			if *le != *re || le.Status != tc.status {
				t.Errorf("remote %+v\n local %+v (want status %d)", re, le, tc.status)
			}
		})
	}

	// Overloaded: one generation holds the only slot.
	hold, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := c.Generate(hold, chat("Hello", 100))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	_, lerr := r.Generate(ctx, chat("hi", 1))
	_, rerr := c.Generate(ctx, chat("hi", 1))
	if !errors.Is(rerr, engine.ErrOverloaded) {
		t.Fatalf("remote overload: %v", rerr)
	}
	if le, re := openai.FromEngine(lerr), openai.FromEngine(rerr); *le != *re || re.Status != 429 || re.RetryAfter != 1 {
		t.Errorf("overload: remote %+v, local %+v", re, le)
	}
	cancel()
	<-w.done

	// A peer nobody listens on is ErrUnavailable (503), quickly.
	dead, err := remote.Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	start := time.Now()
	_, err = dead.Generate(ctx, chat("hi", 1))
	var ue *remote.UnreachableError
	if !errors.Is(err, engine.ErrUnavailable) || !errors.As(err, &ue) {
		t.Fatalf("refused peer: %v", err)
	}
	if e := openai.FromEngine(err); e.Status != 503 {
		t.Errorf("refused peer answers %d", e.Status)
	}
	t.Logf("refused peer detected in %v", time.Since(start))
}

// TestCancelStopsRemoteGeneration: cancelling the caller's context stops
// the generation on the peer within 200 ms.
func TestCancelStopsRemoteGeneration(t *testing.T) {
	r := newRunner(t, runner.Config{})
	w := newWatched(r)
	_, c := serve(t, "peer-1", w, nil)

	var worst time.Duration
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := c.Generate(ctx, chat("Hello", 4000))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if ev := <-ch; ev.Done {
				t.Fatalf("finished early: %+v", ev)
			}
		}
		start := time.Now()
		cancel()
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the remote generation still runs 5 s after the cancel")
		}
		took := time.Since(start)
		worst = max(worst, took)
		t.Logf("run %d: remote generation stopped %v after the client cancelled", i, took)
		for range ch {
		}
	}
	if worst > 200*time.Millisecond {
		t.Errorf("remote generation stopped %v after the cancel, want < 200ms", worst)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := r.Stats(); st.InFlight != 0 || st.Cancelled != 3 {
		t.Errorf("engine after cancels: %+v, want 0 in flight, 3 cancelled", st)
	}
}

// TestPeerDiesMidStream: a peer that stops after the first event gives
// the caller an error event (never a clean end, never a hang).
func TestPeerDiesMidStream(t *testing.T) {
	r := newRunner(t, runner.Config{})
	srv, c := serve(t, "peer-1", r, nil)
	ch, err := c.Generate(context.Background(), chat("Hello", 4000))
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Err != nil || ev.Done {
		t.Fatalf("first event %+v", ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: cut the calls now
	srv.Stop(ctx)
	var last engine.Event
	for ev := range ch {
		last = ev
	}
	if !errors.Is(last.Err, engine.ErrUnavailable) {
		t.Fatalf("last event after the peer died: %+v, want ErrUnavailable", last)
	}
}

func TestStatsStream(t *testing.T) {
	var n atomic.Int64
	_, c := serve(t, "peer-7", nil, func() remote.Stats {
		k := n.Add(1)
		return remote.Stats{InFlight: k, Queued: 2, KVBytes: 3 << 20, FreeMemoryBytes: 8 << 30, TokensPerSecond: 12.5}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []remote.PeerStats
	err := c.WatchStats(ctx, remote.MinStatsInterval, func(s remote.PeerStats) {
		got = append(got, s)
		if len(got) == 3 {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range got {
		want := remote.Stats{InFlight: int64(i + 1), Queued: 2, KVBytes: 3 << 20, FreeMemoryBytes: 8 << 30, TokensPerSecond: 12.5}
		if s.NodeID != "peer-7" || s.Stats != want || time.Since(s.At) > time.Minute {
			t.Errorf("report %d: %+v, want %+v", i, s, want)
		}
	}
	if err := c.WatchStats(context.Background(), time.Millisecond, func(remote.PeerStats) {}); err == nil {
		t.Error("an interval under the minimum was accepted")
	}
}

func TestLoadsFollowsPeers(t *testing.T) {
	var inFlight atomic.Int64
	inFlight.Store(3)
	srv, _ := serve(t, "peer-1", nil, func() remote.Stats { return remote.Stats{InFlight: inFlight.Load(), Queued: 2} })
	pool := remote.NewPool()
	defer pool.Close()
	loads := remote.NewLoads(pool, remote.MinStatsInterval)
	defer loads.Close()
	loads.Watch(srv.Addr())
	loads.Watch(srv.Addr()) // twice is once

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 5 s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("first report", func() bool { return loads.Load(srv.Addr()) == 5 })
	inFlight.Store(10)
	waitFor("updated report", func() bool { return loads.Load(srv.Addr()) == 12 })
	if s, ok := loads.Get(srv.Addr()); !ok || s.NodeID != "peer-1" {
		t.Errorf("get: %+v %v", s, ok)
	}
	if _, ok := loads.Get("127.0.0.1:1"); ok {
		t.Error("a peer never watched has figures")
	}

	// The peer goes away: its figures go stale.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv.Stop(ctx)
	waitFor("stale figures", func() bool { _, ok := loads.Get(srv.Addr()); return !ok })
	loads.Forget(srv.Addr())
}

// TestOptionsReachGRPC: the server and client options (where the
// cluster's auth goes) are applied: a server interceptor that wants a
// token refuses a client without it.
func TestOptionsReachGRPC(t *testing.T) {
	const token = "s3cret"
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-cluster-token"); len(v) != 1 || v[0] != token {
			return status.Error(codes.Unauthenticated, "no cluster token")
		}
		return nil
	}
	srv, err := remote.Listen("127.0.0.1:0", remote.ServerConfig{NodeID: "p", Engine: newRunner(t, runner.Config{}), Logger: quiet},
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve()
	defer srv.Stop(context.Background())

	withToken := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return inv(metadata.AppendToOutgoingContext(ctx, "x-cluster-token", token), method, req, reply, cc, opts...)
	}
	withTokenStream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return s(metadata.AppendToOutgoingContext(ctx, "x-cluster-token", token), desc, cc, method, opts...)
	}
	good, _ := remote.Dial(srv.Addr(), grpc.WithChainUnaryInterceptor(withToken), grpc.WithChainStreamInterceptor(withTokenStream))
	defer good.Close()
	bad, _ := remote.Dial(srv.Addr())
	defer bad.Close()

	ctx := context.Background()
	if _, err := good.Models(ctx); err != nil {
		t.Errorf("models with the token: %v", err)
	}
	if ch, err := good.Generate(ctx, chat("hi", 2)); err != nil {
		t.Errorf("generate with the token: %v", err)
	} else {
		drain(t, ch)
	}
	if _, err := bad.Models(ctx); err == nil || !strings.Contains(err.Error(), "no cluster token") {
		t.Errorf("models without the token: %v", err)
	}
	if _, err := bad.Generate(ctx, chat("hi", 2)); err == nil || !strings.Contains(err.Error(), "no cluster token") {
		t.Errorf("generate without the token: %v", err)
	}
}

// TestMalformedRequests: what a broken or hostile peer sends is a 400,
// never a panic.
func TestMalformedRequests(t *testing.T) {
	tests := map[string]*enginepb.Request{
		"messages not JSON":  {Model: "m", MessagesJson: []byte(`[{"role":`)},
		"messages not array": {Model: "m", MessagesJson: []byte(`{"role":"user"}`)},
		"tools of numbers":   {Model: "m", ToolsJson: []byte(`[1,2]`)},
		"kwargs not object":  {Model: "m", ChatTemplateKwargsJson: []byte(`[]`)},
		"priority":           {Model: "m", Priority: 9},
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := remote.RequestFromPB(p)
			if e := openai.FromEngine(err); err == nil || e.Status != 400 {
				t.Errorf("%v → %+v, want a 400", err, e)
			}
		})
	}
}
