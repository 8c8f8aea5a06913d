package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/model"
	"fusion/engine/prefixcache"
	"fusion/engine/runner"
	"fusion/engine/sample"
)

// TestPrefixCachePerStage: a model in 3 stages (the first a runner's,
// the others Pipeline servers with a prefix cache each). The first
// request of a prompt computes every position on every stage and saves
// its blocks on each; the same prompt again restores them on every stage
// (the counters show the prefill skipped everywhere: each stage computes
// only the rest of the prompt and the decode rows), with the whole
// model's greedy tokens and logprobs and, with penalties, its sampled
// ones. A stage whose cache lost the blocks caps what every stage keeps.
func TestPrefixCachePerStage(t *testing.T) {
	dir := demoModel(t, 9)
	models, name := filepath.Dir(dir), filepath.Base(dir)
	middle := load(t, dir, model.Range{Start: 1, End: 2})
	last := load(t, dir, model.Range{Start: 2, End: 4})
	cache := func() *prefixcache.Cache {
		c, err := prefixcache.Open(prefixcache.Config{HotBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	midCache, lastCache := cache(), cache()
	midSpans, lastSpans := &spanLog{name: "mid"}, &spanLog{name: "last"}
	lastSrv, lastAddr, _ := serveTraced(t, func(string) (Stage, bool) {
		return Stage{Generation: 1, Model: last, Cache: lastCache, CacheKey: prefixcache.ModelKey("last")}, true
	}, lastSpans.start)
	midSrv, midAddr, dial := serveTraced(t, func(string) (Stage, bool) {
		return Stage{Generation: 1, Model: middle, Next: lastAddr, Cache: midCache, CacheKey: prefixcache.ModelKey("middle")}, true
	}, midSpans.start)
	cfg := runner.Config{ModelsDir: models, Threads: 1, Backend: runner.BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1}
	whole, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	cfg.CacheHotBytes = 64 << 20
	first, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	down := NewClient(name, 1, midAddr, dial)
	if err := first.SetPipeline(context.Background(), name, &runner.Pipeline{Layers: model.Range{Start: 0, End: 1}, Generation: 1, Down: down, Stages: 3}); err != nil {
		t.Fatal(err)
	}
	const promptLen, decode = 150, 6 // two whole blocks of 64
	prompt := func(seed int) []int {
		toks := make([]int, promptLen)
		for i := range toks {
			toks[i] = (seed*131 + i*7 + 3) % 600
		}
		return toks
	}
	run := func(r *runner.Runner, toks []int, sampled bool) (string, engine.Usage) {
		t.Helper()
		p := sample.DefaultParams()
		p.Temperature, p.Logprobs, p.TopLogprobs = 0, true, 2
		if sampled {
			seed := int64(5)
			p.Temperature, p.Seed, p.RepetitionPenalty, p.FrequencyPenalty = 1.2, &seed, 1.3, 0.4
		}
		ctx := engine.WithPhases(context.Background(), tracedPhases(requestParent))
		return generate(t, ctx, r, &engine.Request{Model: name, PromptTokens: toks, Sampling: p, MaxTokens: decode})
	}
	type counts struct{ first, mid, last, midRestored, lastRestored int64 }
	now := func() counts {
		m, l := midSrv.Counts(), lastSrv.Counts()
		return counts{first.Stats().StepRows, m.Rows, l.Rows, m.Restored, l.Restored}
	}
	rowsOf := func(a, b counts) counts {
		return counts{b.first - a.first, b.mid - a.mid, b.last - a.last, b.midRestored - a.midRestored, b.lastRestored - a.lastRestored}
	}
	for i, tc := range []struct {
		name    string
		sampled bool
	}{{"greedy", false}, {"sampled with penalties", true}} {
		t.Run(tc.name, func(t *testing.T) {
			toks := prompt(i)
			want, _ := run(whole, toks, tc.sampled)
			before := now()
			got, u := run(first, toks, tc.sampled)
			cold := rowsOf(before, now())
			if got != want {
				t.Fatalf("cold, as a pipeline:\n%s\nwhole:\n%s", got, want)
			}
			// Every stage computes the prompt and the decode rows (the
			// last token drawn is not fed back).
			full := int64(promptLen + decode - 1)
			if u.CachedTokens != 0 || cold.first != full || cold.mid != full || cold.last != full || cold.midRestored != 0 || cold.lastRestored != 0 {
				t.Fatalf("cold: cached %d, rows %+v, want %d on every stage", u.CachedTokens, cold, full)
			}
			before = now()
			got, u = run(first, toks, tc.sampled)
			warm := rowsOf(before, now())
			t.Logf("rows per stage cold %+v, warm %+v, cached %d", cold, warm, u.CachedTokens)
			if got != want {
				t.Fatalf("warm, as a pipeline:\n%s\nwhole:\n%s", got, want)
			}
			hit := int64(128) // the whole blocks of the first prompt's blocks (and more, saved at its end)
			rest := full - int64(u.CachedTokens)
			if int64(u.CachedTokens) < hit || warm.first != rest || warm.mid != rest || warm.last != rest ||
				warm.midRestored != int64(u.CachedTokens) || warm.lastRestored != int64(u.CachedTokens) {
				t.Fatalf("warm: cached %d, rows %+v: want every stage to restore ≥ %d and compute only the rest", u.CachedTokens, warm, hit)
			}
			// Each run's sequence has a span on both later stages, the
			// warm one opened by a Prefix too: the middle's is the child of
			// the request's, the last's of the middle's, with the rows each
			// computed.
			for _, run := range []struct {
				name string
				rows int64
			}{{"cold", full}, {"warm", rest}} {
				mid, last := midSpans.take(t), lastSpans.take(t)
				if mid.parent != requestParent || last.parent != mid.own || mid.positions != run.rows || last.positions != run.rows {
					t.Errorf("%s spans: middle %+v, last %+v; want the chain request → middle → last with %d positions each", run.name, mid, last, run.rows)
				}
			}
		})
	}
	// The last stage's cache lost the blocks: every stage keeps what it
	// has (nothing), and the answer is still the whole model's.
	toks := prompt(0)
	want, _ := run(whole, toks, false)
	lastCache.ClearHot()
	before := now()
	got, u := run(first, toks, false)
	miss := rowsOf(before, now())
	if got != want || u.CachedTokens != 0 || miss.last != int64(promptLen+decode-1) || miss.mid != miss.last {
		t.Fatalf("after the last stage's cache was cleared: cached %d, rows %+v, same answer %v", u.CachedTokens, miss, got == want)
	}
	deadline := time.Now().Add(10 * time.Second) // frees go down after the answers
	for midSrv.Sequences()+lastSrv.Sequences() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sequences still held on the later stages", midSrv.Sequences()+lastSrv.Sequences())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// generate runs req on r and returns its events rendered (tokens,
// logprobs, finish reason) and its usage.
func generate(t *testing.T, ctx context.Context, r *runner.Runner, req *engine.Request) (string, engine.Usage) {
	t.Helper()
	ch, err := r.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	var u engine.Usage
	for ev := range ch {
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		s += fmt.Sprintf("%v %v %s|", ev.Tokens, ev.TopLogprobs, ev.FinishReason)
		if ev.Done {
			u = ev.Usage
		}
	}
	return s, u
}

// requestParent is the traceparent of the requests' span on the first
// stage.
const requestParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// tracedPhases is a request's engine.Phases in a trace.
type tracedPhases string

func (tracedPhases) Phase(engine.Phase, time.Time, time.Time) {}
func (p tracedPhases) TraceParent() string                    { return string(p) }

// spanLog records a stage's spans (StartSpan) as they end.
type spanLog struct {
	name  string
	mu    sync.Mutex
	n     int
	ended []loggedSpan
}

type loggedSpan struct {
	parent, own string
	positions   int64
}

func (l *spanLog) start(parent, name string, _ map[string]string) (string, func(map[string]int64)) {
	l.mu.Lock()
	l.n++
	own := fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319c-%016x-01", len(l.name)*1000+l.n)
	l.mu.Unlock()
	return own, func(c map[string]int64) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ended = append(l.ended, loggedSpan{parent: parent, own: own, positions: c["fusion.pipeline.positions"]})
	}
}

// take waits for the next ended span.
func (l *spanLog) take(t *testing.T) loggedSpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // spans end with the frees, after the answer
	for {
		l.mu.Lock()
		if len(l.ended) > 0 {
			sp := l.ended[0]
			l.ended = l.ended[1:]
			l.mu.Unlock()
			return sp
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no span ended on the %s stage", l.name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
