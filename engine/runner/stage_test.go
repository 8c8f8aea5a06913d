package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"fusion/engine"
	"fusion/engine/demo"
	"fusion/engine/model"
)

// localDown is a Downstream that runs the later layers in this process
// on a StageModel, sampling as a last stage does: the runner's side of a
// pipeline without the network. It counts what it sent back.
type localDown struct {
	sm       *StageModel
	mu       sync.Mutex
	seqs     map[uint64]*model.Sequence
	samplers StageSamplers
	drawn    int // tokens drawn here
	rows     int // logits rows sent back
}

func (d *localDown) Step(ctx context.Context, seqs []StageSeq, h *model.Hidden) ([]StageResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	in := make([]model.Input, len(seqs))
	for i, s := range seqs {
		q := d.seqs[s.ID]
		if q == nil {
			if s.MaxLen == 0 {
				return nil, fmt.Errorf("sequence %d unknown", s.ID)
			}
			var err error
			if q, err = d.sm.NewSequence(s.MaxLen); err != nil {
				return nil, err
			}
			d.seqs[s.ID] = q
		}
		in[i] = model.Input{Seq: q, Len: s.Len}
	}
	out, err := d.sm.Forward(ctx, in, model.Range{}, h)
	if err != nil {
		return nil, err
	}
	res, err := d.samplers.Step(seqs, out.Logits)
	for _, r := range res {
		if r.Drawn != nil {
			d.drawn++
		}
		if r.Logits != nil {
			d.rows++
		}
	}
	return res, err
}

func (d *localDown) Free(ids []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.samplers.Free(ids...)
	for _, id := range ids {
		if q := d.seqs[id]; q != nil {
			q.Close()
			delete(d.seqs, id)
		}
	}
}

func (d *localDown) Close() error { return nil }

func (d *localDown) held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.seqs)
}

// TestPipelineFirstStage: a runner whose memory budget cannot hold the
// whole model refuses to load it, but runs it as a pipeline's first
// stage (half the layers here, the rest downstream), with the tokens and
// logprobs of the whole model on a runner that can hold it; every
// finished sequence is freed downstream.
func TestPipelineFirstStage(t *testing.T) {
	dir := t.TempDir()
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 4, 11
	if _, err := demo.Create(filepath.Join(dir, "deep"), o); err != nil {
		t.Fatal(err)
	}
	whole, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	size := estimateBytes(filepath.Join(dir, "deep"))
	small, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1, MemoryBudget: size * 3 / 4})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := small.Load(context.Background(), "deep"); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("loading the whole model under a budget of 3/4 of it: %v, want ErrOverBudget", err)
	}
	if n := small.NumLayers("deep"); n != 4 {
		t.Fatalf("NumLayers = %d, want 4", n)
	}
	// The later stage is another node's: here, the whole runner's.
	sm, err := whole.LoadStage(context.Background(), "deep", model.Range{Start: 2, End: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	down := &localDown{sm: sm, seqs: map[uint64]*model.Sequence{}}
	if err := small.SetPipeline(context.Background(), "deep", &Pipeline{Layers: model.Range{Start: 0, End: 2}, Generation: 1, Down: down}); err != nil {
		t.Fatal(err)
	}
	if got := small.Pipelines(); len(got) != 1 || got[0] != "deep" {
		t.Fatalf("Pipelines = %v", got)
	}
	seed := func(v int64) *int64 { return &v }
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer"}},"required":["name","n"],"additionalProperties":false}`
	cases := []struct {
		name string
		set  func(*engine.Request)
	}{
		{"greedy", func(*engine.Request) {}},
		{"seeded temperature", func(r *engine.Request) {
			r.Sampling.Temperature, r.Sampling.TopP, r.Sampling.TopK, r.Sampling.Seed = 3, 0.98, 200, seed(7)
		}},
		{"penalties and bias", func(r *engine.Request) {
			r.Sampling.Temperature, r.Sampling.Seed = 1.1, seed(3)
			r.Sampling.RepetitionPenalty, r.Sampling.PresencePenalty, r.Sampling.FrequencyPenalty = 1.3, 0.5, 0.7
			r.Sampling.LogitBias = map[int]float64{5: 4, 6: -100}
		}},
		{"json schema", func(r *engine.Request) {
			r.Sampling.Temperature, r.Sampling.Seed = 2, seed(11)
			r.ResponseFormat = &engine.ResponseFormat{Schema: []byte(schema)}
			r.MaxTokens = 40
		}},
	}
	run := func(r *Runner, prompt string, set func(*engine.Request)) string {
		req := chat("deep", prompt, 12)
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
		set(req)
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		for ev := range ch {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			s += fmt.Sprintf("%q %v %v %s|", ev.Text, ev.Tokens, ev.TopLogprobs, ev.FinishReason)
		}
		return s
	}
	prompts := []string{"split me", "in two", "bit for bit", "four at once"}
	for _, logitsBack := range []bool{false, true} {
		if logitsBack {
			// The same answers with the logits coming back instead.
			if err := small.SetPipeline(context.Background(), "deep", &Pipeline{Layers: model.Range{Start: 0, End: 2}, Generation: 2, Down: down, LogitsBack: true}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/logits back %v", tc.name, logitsBack), func(t *testing.T) {
				down.mu.Lock()
				down.drawn, down.rows = 0, 0
				down.mu.Unlock()
				got := make([]string, len(prompts))
				var wg sync.WaitGroup
				for i, p := range prompts {
					wg.Go(func() { got[i] = run(small, p, tc.set) })
				}
				wg.Wait()
				for i, p := range prompts {
					if want := run(whole, p, tc.set); got[i] != want {
						t.Errorf("%q as a pipeline:\n%s\nwhole:\n%s", p, got[i], want)
					}
				}
				down.mu.Lock()
				drawn, rows := down.drawn, down.rows
				down.mu.Unlock()
				t.Logf("drawn on the last stage %d, logits rows sent back %d", drawn, rows)
				if logitsBack && (drawn != 0 || rows == 0) || !logitsBack && (drawn == 0 || rows != 0) {
					t.Errorf("%d tokens drawn downstream and %d logits rows back (logits back: %v)", drawn, rows, logitsBack)
				}
				if n := down.held(); n != 0 {
					t.Errorf("%d sequences still held downstream", n)
				}
			})
		}
	}
	if err := small.SetPipeline(context.Background(), "deep", nil); err != nil {
		t.Fatal(err)
	}
	if len(small.Pipelines()) != 0 {
		t.Fatal("the pipeline is still set")
	}
}

// TestStageBudget: later pipeline stages count against the memory budget:
// a stage that does not fit beside the ones held is refused with
// ErrOverBudget, fits once they are closed, and an idle model is evicted
// to make room for one.
func TestStageBudget(t *testing.T) {
	dir := t.TempDir()
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 4, 12
	if _, err := demo.Create(filepath.Join(dir, "deep"), o); err != nil {
		t.Fatal(err)
	}
	o.Layers, o.Seed = 1, 13
	if _, err := demo.Create(filepath.Join(dir, "small"), o); err != nil {
		t.Fatal(err)
	}
	size := estimateBytes(filepath.Join(dir, "deep"))
	// A budget that holds layers [1, 4) and the head, little more.
	_, fp, err := model.Footprint(filepath.Join(dir, "deep"))
	if err != nil {
		t.Fatal(err)
	}
	budget := fp.Bytes[1] + fp.Bytes[2] + fp.Bytes[3] + fp.Last + 1024
	r, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1, MemoryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if r.ModelNeed("deep") <= size {
		t.Errorf("ModelNeed = %d, want the weights (%d) and a context's KV", r.ModelNeed("deep"), size)
	}
	half, err := r.LoadStage(ctx, "deep", model.Range{Start: 2, End: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadStage(ctx, "deep", model.Range{Start: 1, End: 4}); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a second stage of layers [1, 4) beside [2, 4) under a budget of the first alone: %v, want ErrOverBudget", err)
	}
	if err := half.Close(); err != nil {
		t.Fatal(err)
	}
	three, err := r.LoadStage(ctx, "deep", model.Range{Start: 1, End: 4})
	if err != nil {
		t.Fatalf("after the first stage closed: %v", err)
	}
	three.Close()
	// An idle model gives its room to a stage that needs it.
	if err := r.Load(ctx, "small"); err != nil {
		t.Fatal(err)
	}
	more, err := r.LoadStage(ctx, "deep", model.Range{Start: 0, End: 3})
	if err != nil {
		t.Fatalf("a stage that fits once the idle model is evicted: %v", err)
	}
	defer more.Close()
	for _, s := range r.List() {
		if s.ID == "small" && (s.State == StateReady || s.State == StateIdle) {
			t.Errorf("small is still loaded (%v) beside a stage that needed its room", s.State)
		}
	}
}

// queuedDown is a Starter over a localDown: steps are taken in the order
// they were started by a goroutine of its own (a later stage on another
// machine), and it records how many were in flight at most.
type queuedDown struct {
	*localDown
	queue chan func()
	mu    sync.Mutex
	open  int // started, not answered
	most  int
}

func newQueuedDown(d *localDown) *queuedDown {
	q := &queuedDown{localDown: d, queue: make(chan func(), 64)}
	go func() {
		for f := range q.queue {
			f()
		}
	}()
	return q
}

func (q *queuedDown) Start(ctx context.Context, seqs []StageSeq, h *model.Hidden) (func() ([]StageResult, error), error) {
	h = &model.Hidden{Rows: h.Rows, Cols: h.Cols, Data: slices.Clone(h.Data)}
	q.mu.Lock()
	q.open++
	q.most = max(q.most, q.open)
	q.mu.Unlock()
	type answer struct {
		res []StageResult
		err error
	}
	ch := make(chan answer, 1)
	q.queue <- func() {
		res, err := q.localDown.Step(ctx, seqs, h)
		q.mu.Lock()
		q.open--
		q.mu.Unlock()
		ch <- answer{res, err}
	}
	return func() ([]StageResult, error) { a := <-ch; return a.res, a.err }, nil
}

func (q *queuedDown) Close() error { close(q.queue); return nil }

func (q *queuedDown) reset() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.most
	q.most = 0
	return m
}

// TestPipelineMicroBatches: with concurrent streams the first stage
// splits the running sequences into micro-batches and keeps several in
// flight down the pipeline (the next stage works on one while this one
// computes the next), and the answers — greedy, and seeded sampling with
// logprobs — are those of the whole model on one runner. With one
// micro-batch a single step is in flight at a time.
func TestPipelineMicroBatches(t *testing.T) {
	dir := t.TempDir()
	o := demo.DefaultOptions()
	o.Layers, o.Seed = 4, 13
	if _, err := demo.Create(filepath.Join(dir, "deep"), o); err != nil {
		t.Fatal(err)
	}
	whole, first, sm := stageRunners(t, dir, "deep", model.Range{Start: 2, End: 4})
	run := func(r *Runner, prompt string, sampled bool) string {
		req := chat("deep", prompt, 10)
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 2
		if sampled {
			seed := int64(len(prompt))
			req.Sampling.Temperature, req.Sampling.Seed = 1.5, &seed
		}
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Error(err)
			return ""
		}
		var s string
		for ev := range ch {
			if ev.Err != nil {
				t.Error(ev.Err)
			}
			s += fmt.Sprintf("%q %v %v %s|", ev.Text, ev.Tokens, ev.TopLogprobs, ev.FinishReason)
		}
		return s
	}
	prompts := []string{"one", "two streams", "three at once", "four", "five in flight", "six"}
	want := map[string]string{}
	for _, p := range prompts {
		want[p+"/greedy"], want[p+"/sampled"] = run(whole, p, false), run(whole, p, true)
	}
	for _, tc := range []struct {
		micro    int
		wantMost func(int) bool
	}{
		{0, func(n int) bool { return n >= 2 }}, // one per stage: 2
		{3, func(n int) bool { return n >= 2 && n <= 3 }},
		{1, func(n int) bool { return n == 1 }},
	} {
		t.Run(fmt.Sprintf("micro-batches %d", tc.micro), func(t *testing.T) {
			down := newQueuedDown(&localDown{sm: sm, seqs: map[uint64]*model.Sequence{}})
			p := &Pipeline{Layers: model.Range{Start: 0, End: 2}, Generation: uint64(tc.micro + 1), Down: down, Stages: 2, MicroBatches: tc.micro}
			if err := first.SetPipeline(context.Background(), "deep", p); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, p := range prompts {
				for _, sampled := range []bool{false, true} {
					wg.Go(func() {
						s := run(first, p, sampled)
						mu.Lock()
						got[fmt.Sprintf("%s/%s", p, map[bool]string{false: "greedy", true: "sampled"}[sampled])] = s
						mu.Unlock()
					})
				}
			}
			wg.Wait()
			for k, w := range want {
				if got[k] != w {
					t.Errorf("%s as a pipeline:\n%s\nwhole:\n%s", k, got[k], w)
				}
			}
			most := down.reset()
			t.Logf("%d streams, at most %d steps in flight down the pipeline", 2*len(prompts), most)
			if !tc.wantMost(most) {
				t.Errorf("at most %d steps in flight with %d micro-batches", most, tc.micro)
			}
			if n := down.held(); n != 0 {
				t.Errorf("%d sequences still held downstream", n)
			}
		})
	}
}

// TestPipelineGemma4: a gemma4_text (per-layer inputs, KV shared by its
// last three of six layers, full layers wider than sliding ones) run as
// a pipeline of layers [0, 1) here and [1, 6) downstream — the per-layer
// inputs of the later layers travel with the hidden state — answers as
// the whole model does, greedy and sampled; a later stage that would hold
// a KV-shared layer without the layer whose KV it reads is refused.
func TestPipelineGemma4(t *testing.T) {
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "g4"), demo.Options{Arch: "gemma4_text", Layers: 6, Hidden: 64, Heads: 2, KVHeads: 1,
		Intermediate: 64, SlidingWindow: 20, SlidingPattern: 2, Seed: 12}); err != nil {
		t.Fatal(err)
	}
	whole, first, sm := stageRunners(t, dir, "g4", model.Range{Start: 1, End: 6})
	// Layers 3–5 read the KV of layers 1 (full) and 2 (sliding).
	if got := whole.MaxCut("g4"); got != 1 {
		t.Errorf("MaxCut = %d, want 1", got)
	}
	if _, err := whole.LoadStage(context.Background(), "g4", model.Range{Start: 2, End: 6}); err == nil || !strings.Contains(err.Error(), "layer 3 reads layer 1's KV, outside the range [2, 6)") {
		t.Errorf("a stage of layers [2, 6) (layer 3 reads layer 1's KV): %v", err)
	}
	down := &localDown{sm: sm, seqs: map[uint64]*model.Sequence{}}
	if err := first.SetPipeline(context.Background(), "g4", &Pipeline{Layers: model.Range{Start: 0, End: 1}, Generation: 1, Down: down}); err != nil {
		t.Fatal(err)
	}
	samePipelineRuns(t, first, whole, "g4", 16, "per-layer inputs", "travel with the hidden state")
	down.mu.Lock()
	drawn := down.drawn
	down.mu.Unlock()
	if drawn == 0 {
		t.Error("no token drawn on the later stage: the pipeline did not run")
	}
	if n := down.held(); n != 0 {
		t.Errorf("%d sequences still held downstream", n)
	}
}

// stageRunners returns two CPU runners over the models in dir, closed
// when the test ends: whole runs model name alone, first is for a
// pipeline's first stage; and sm, the stage of layers later loaded on
// whole, as the next node of a pipeline would load it.
func stageRunners(t *testing.T, dir, name string, later model.Range) (whole, first *Runner, sm *StageModel) {
	t.Helper()
	newRunner := func() *Runner {
		r, err := New(Config{ModelsDir: dir, Threads: 1, Backend: BackendCPU, CacheHotBytes: -1, CacheSSDBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	whole, first = newRunner(), newRunner()
	sm, err := whole.LoadStage(context.Background(), name, later)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Close() })
	return whole, first, sm
}

// samePipelineRuns generates each prompt on first (a pipeline's first
// stage), all at once, greedy and then seeded at temperature 1.5 with
// log-probs, and wants each answer, events and all, to be whole's.
func samePipelineRuns(t *testing.T, first, whole *Runner, modelName string, maxTokens int, prompts ...string) {
	t.Helper()
	seed := int64(5)
	run := func(r *Runner, prompt string, sampled bool) string {
		req := chat(modelName, prompt, maxTokens)
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
		if sampled {
			req.Sampling.Temperature, req.Sampling.Seed = 1.5, &seed
		}
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		for ev := range ch {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			s += fmt.Sprintf("%q %v %v %s|", ev.Text, ev.Tokens, ev.TopLogprobs, ev.FinishReason)
		}
		return s
	}
	for _, sampled := range []bool{false, true} {
		got := make([]string, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Go(func() { got[i] = run(first, p, sampled) })
		}
		wg.Wait()
		for i, p := range prompts {
			if want := run(whole, p, sampled); got[i] != want {
				t.Errorf("%q (sampled %v) as a pipeline:\n%s\nwhole:\n%s", p, sampled, got[i], want)
			}
		}
	}
}
