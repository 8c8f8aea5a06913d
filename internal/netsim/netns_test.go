package netsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"fusion/cluster/pipeline"
	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/model"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// chain is a chain of n namespaces shaped as link, removed when the test
// ends (failed or not); the test skips, saying why, where namespaces
// cannot be made.
func chain(t *testing.T, n int, link Link) *Chain {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping the network namespace test: %v", err)
	}
	c, err := NewChain(context.Background(), n, link)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("skipping the network namespace test: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// TestChainDelay: over a chain of namespaces, node 0 reaches node 1's
// listener over hop 0 — every round trip at least twice the delay
// (netem or the relay), the tbf of the hop counting the bytes that
// crossed it — and cannot reach node 2 but through node 1.
func TestChainDelay(t *testing.T) {
	for _, tc := range []struct {
		link  string
		nodes int
	}{
		{"5ms+1gbit", 3},
		{"5ms", 2},
		{"1gbit", 2},
	} {
		t.Run(tc.link, func(t *testing.T) {
			link, err := ParseLink(tc.link)
			if err != nil {
				t.Fatal(err)
			}
			c := chain(t, tc.nodes, link)
			t.Logf("delay by %q, bandwidth by %q", c.DelayMethod, c.BandwidthMethod)
			if (c.DelayMethod != "") != (link.Delay > 0) || (c.BandwidthMethod == "tbf") != (link.RateBit > 0) {
				t.Fatalf("delay by %q, bandwidth by %q for %s", c.DelayMethod, c.BandwidthMethod, tc.link)
			}
			lis, err := c.Listen(1, net.JoinHostPort(c.Addr(1), "0"))
			if err != nil {
				t.Fatal(err)
			}
			serveEcho(t, lis)
			via, err := c.Via(0, lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var before int64
			if link.RateBit > 0 {
				if before, err = c.SentBytes(ctx, 0); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := c.Dialer(0)(ctx, "tcp", via)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			for range 3 {
				if got := rtt(t, conn); got < 2*link.Delay {
					t.Fatalf("a round trip over the hop took %v, want ≥ %v", got, 2*link.Delay)
				}
			}
			if link.RateBit > 0 {
				if after, err := c.SentBytes(ctx, 0); err != nil || after <= before {
					t.Fatalf("hop 0's tbf sent %d bytes, %d before (%v)", after, before, err)
				}
			}
			if tc.nodes > 2 {
				if _, err := c.Dialer(0)(ctx, "tcp", net.JoinHostPort(c.Addr(2), "1")); err == nil {
					t.Fatal("node 0 reached node 2 directly")
				}
			}
		})
	}
}

// TestPipelineOverSlowLink: a demo model in two stages whose hop crosses
// a shaped link (1 Gbit/s by tbf, 10 ms each way by netem or the relay),
// and in three stages over two such hops (5 ms, the middle stage
// dialling the last from its own namespace), gives the tokens and
// logprobs of the whole model on one node, greedy and seeded, two
// requests at once; a gRPC ping over the first hop takes at least twice
// the delay, and each token at least the round trips of every hop (a
// step goes down and back over each).
func TestPipelineOverSlowLink(t *testing.T) {
	for _, tc := range []struct {
		stages int
		delay  time.Duration
		bounds []int // stage i runs layers [bounds[i], bounds[i+1])
	}{
		{2, 10 * time.Millisecond, []int{0, 2, 4}},
		{3, 5 * time.Millisecond, []int{0, 1, 3, 4}},
	} {
		t.Run(fmt.Sprintf("%d stages", tc.stages), func(t *testing.T) { slowPipeline(t, tc.delay, tc.bounds) })
	}
}

func slowPipeline(t *testing.T, d time.Duration, bounds []int) {
	k := len(bounds) - 1
	c := chain(t, k, Link{Delay: d, RateBit: 1e9})
	t.Logf("delay by %s, bandwidth by %s", c.DelayMethod, c.BandwidthMethod)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dir := t.TempDir()
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 4, 5
	if _, err := demo.Create(filepath.Join(dir, "m"), o); err != nil {
		t.Fatal(err)
	}
	newRunner := func() *runner.Runner {
		r, err := runner.New(runner.Config{ModelsDir: dir, Threads: 1, Backend: runner.BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	whole, first := newRunner(), newRunner()
	// dial is node i's gRPC dial, from its namespace.
	dial := func(i int) pipeline.Dial {
		return func(addr string) (grpc.ClientConnInterface, error) {
			return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return c.Dialer(i)(ctx, "tcp", addr) }))
		}
	}

	// Stages k−1 … 1 served in their nodes' namespaces, each dialling
	// the next over its hop.
	next := ""
	for i := k - 1; i >= 1; i-- {
		sm, err := whole.LoadStage(ctx, "m", model.Range{Start: bounds[i], End: bounds[i+1]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sm.Close() })
		lis, err := c.Listen(i, net.JoinHostPort(c.Addr(i), "0"))
		if err != nil {
			t.Fatal(err)
		}
		via := ""
		if next != "" {
			if via, err = c.Via(i, next); err != nil {
				t.Fatal(err)
			}
		}
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, health.NewServer())
		st := pipeline.Stage{Generation: 1, Model: sm.Model, Next: via}
		pipeline.Register(gs, func(string) (pipeline.Stage, bool) { return st, true }, dial(i), nil)
		go gs.Serve(lis)
		t.Cleanup(gs.Stop)
		next = lis.Addr().String()
	}

	// Stage 0 here, dialling from node 0 over hop 0.
	via, err := c.Via(0, next)
	if err != nil {
		t.Fatal(err)
	}
	down := pipeline.NewClient("m", 1, via, dial(0))
	if err := first.SetPipeline(ctx, "m", &runner.Pipeline{Layers: model.Range{Start: 0, End: bounds[1]}, Generation: 1, Down: down, Stages: k}); err != nil {
		down.Close()
		t.Fatal(err)
	}

	// The gRPC ping over the link.
	conn, err := dial(0)(via)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.(*grpc.ClientConn).Close()
	hc := healthpb.NewHealthClient(conn)
	var pings []time.Duration
	for range 5 {
		start := time.Now()
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		pings = append(pings, time.Since(start))
	}
	slices.Sort(pings)
	t.Logf("gRPC ping over the hop: %v (median of %v)", pings[2], pings)
	if pings[0] < 2*d {
		t.Fatalf("a gRPC ping over the hop took %v, want ≥ %v", pings[0], 2*d)
	}

	sent := func() []int64 {
		var n []int64
		for h := range k - 1 {
			b, err := c.SentBytes(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			n = append(n, b)
		}
		return n
	}
	before := sent()
	const maxTokens = 8
	run := func(r *runner.Runner, text string, seed *int64) (string, time.Duration, int) {
		p := sample.DefaultParams()
		p.Temperature, p.Seed, p.Logprobs, p.TopLogprobs = 0, seed, true, 3
		if seed != nil {
			p.Temperature, p.TopP = 1.5, 0.95
		}
		req := &engine.Request{Model: "m", Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", text)},
			Sampling: p, MaxTokens: maxTokens}
		start := time.Now()
		ch, err := r.Generate(ctx, req)
		if err != nil {
			t.Error(err)
			return "", 0, 0
		}
		var s string
		n := 0
		for ev := range ch {
			if ev.Err != nil {
				t.Error(ev.Err)
			}
			n += len(ev.Tokens)
			s += fmt.Sprintf("%q %v %v %s|", ev.Text, ev.Tokens, ev.TopLogprobs, ev.FinishReason)
		}
		return s, time.Since(start), n
	}
	seven := int64(7)
	for _, tc := range []struct {
		name string
		seed *int64
	}{{"greedy", nil}, {"seeded", &seven}} {
		t.Run(tc.name, func(t *testing.T) {
			prompts := []string{"over a slow link", "bit for bit"}
			got := make([]string, len(prompts))
			took := make([]time.Duration, len(prompts))
			tokens := make([]int, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Go(func() { got[i], took[i], tokens[i] = run(first, p, tc.seed) })
			}
			wg.Wait()
			for i, p := range prompts {
				want, _, _ := run(whole, p, tc.seed)
				if got[i] != want {
					t.Errorf("%q over the slow link:\n%s\none node:\n%s", p, got[i], want)
				}
				if tokens[i] == 0 {
					t.Fatalf("%q gave no tokens", p)
				}
				// Every token is at least one round trip over every hop.
				per, least := took[i]/time.Duration(tokens[i]), 2*d*time.Duration(k-1)
				t.Logf("%q: %d tokens, %v a token over the links", p, tokens[i], per)
				if per < least {
					t.Errorf("%q: %v a token, less than the hops' round trips %v: the delay is not there", p, per, least)
				}
			}
		})
	}
	for h, after := range sent() {
		t.Logf("hop %d's tbf sent %d bytes during the requests", h, after-before[h])
		if hidden := int64(o.Hidden) * 4; after-before[h] < hidden {
			t.Errorf("hop %d's tbf sent %d bytes, less than one hidden state (%d): the pipeline did not cross it", h, after-before[h], hidden)
		}
	}
}
