package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/model"
)

// localDown is a Downstream that runs the later layers in this process
// on a StageModel: the runner's side of a pipeline without the network.
type localDown struct {
	sm   *StageModel
	mu   sync.Mutex
	seqs map[uint64]*model.Sequence
}

func (d *localDown) Step(ctx context.Context, seqs []StageSeq, h *model.Hidden) ([][]float32, error) {
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
	return out.Logits, nil
}

func (d *localDown) Free(ids []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	sm, err := small.LoadStage(context.Background(), "deep", model.Range{Start: 2, End: 4})
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
	run := func(r *Runner, prompt string) string {
		req := chat("deep", prompt, 12)
		req.Sampling.Logprobs, req.Sampling.TopLogprobs = true, 3
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		for ev := range ch {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			s += fmt.Sprintf("%q %v %v|", ev.Text, ev.Tokens, ev.TopLogprobs)
		}
		return s
	}
	prompts := []string{"split me", "in two", "bit for bit", "four at once"}
	got := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() { got[i] = run(small, p) })
	}
	wg.Wait()
	for i, p := range prompts {
		if want := run(whole, p); got[i] != want {
			t.Errorf("%q as a pipeline:\n%s\nwhole:\n%s", p, got[i], want)
		}
	}
	if n := down.held(); n != 0 {
		t.Errorf("%d sequences still held downstream", n)
	}
	if err := small.SetPipeline(context.Background(), "deep", nil); err != nil {
		t.Fatal(err)
	}
	if len(small.Pipelines()) != 0 {
		t.Fatal("the pipeline is still set")
	}
}
