package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func waitState(t *testing.T, s Store, id string, want func(Job) bool) Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, ok := s.Get(id)
		if ok && want(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %+v (found %v)", id, j, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newManager(t *testing.T, store Store, node string) *Manager {
	t.Helper()
	m := New(Config{Node: node, Store: store, ProgressEvery: 10 * time.Millisecond, LogLines: 3, MaxRunning: 2})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestLifecycle: a job's record goes running → done with its progress
// (rate and ETA while it runs), the last log lines and its result; a
// failing job records its error, a cancelled one says so, and Close
// leaves its live jobs interrupted.
func TestLifecycle(t *testing.T) {
	store, err := OpenMemStore("")
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, store, "a")
	ctx := context.Background()
	step := make(chan struct{})
	j, err := m.Submit(ctx, "download", map[string]string{"repo": "x/y"}, func(ctx context.Context, r *Reporter) (any, error) {
		r.SetTotal("bytes", 100)
		for i := 1; i <= 5; i++ {
			r.Logf("line %d", i)
		}
		r.SetDone(40)
		<-step
		r.SetDone(80)
		<-step
		return map[string]int{"files": 3}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if j.State != Running || j.Node != "a" || string(j.Params) != `{"repo":"x/y"}` {
		t.Errorf("submitted %+v", j)
	}
	got := waitState(t, store, j.ID, func(j Job) bool { return j.Progress.Done == 40 })
	if got.Progress.Percent != 40 || got.Progress.Unit != "bytes" {
		t.Errorf("progress %+v", got.Progress)
	}
	if len(got.Log) != 3 || !strings.HasSuffix(got.Log[2], "line 5") || !strings.HasSuffix(got.Log[0], "line 3") {
		t.Errorf("log %q, want the last 3 lines", got.Log)
	}
	step <- struct{}{}
	got = waitState(t, store, j.ID, func(j Job) bool { return j.Progress.Done == 80 && j.Progress.Rate > 0 })
	if got.Progress.ETA <= 0 {
		t.Errorf("no ETA while running: %+v", got.Progress)
	}
	step <- struct{}{}
	got = waitState(t, store, j.ID, func(j Job) bool { return Final(j.State) })
	if got.State != Done || string(got.Result) != `{"files":3}` || got.Progress.Percent != 100 || got.Progress.Rate != 0 {
		t.Errorf("done %+v", got)
	}
	if _, err := m.Cancel(ctx, j.ID); !errors.Is(err, ErrFinished) {
		t.Errorf("cancelling a finished job: %v", err)
	}

	f, _ := m.Submit(ctx, "download", nil, func(context.Context, *Reporter) (any, error) { return nil, errors.New("401 Unauthorized: gated") })
	if got := waitState(t, store, f.ID, func(j Job) bool { return Final(j.State) }); got.State != Failed || got.Error != "401 Unauthorized: gated" {
		t.Errorf("failed job %+v", got)
	}

	block := func(ctx context.Context, _ *Reporter) (any, error) { <-ctx.Done(); return nil, ctx.Err() }
	c, _ := m.Submit(ctx, "download", nil, block)
	last, err := m.Cancel(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Get(c.ID); got.State != Cancelled || last.State != Cancelled {
		t.Errorf("cancelled job %+v, Cancel answered %+v", got, last)
	}
	if err := store.Delete(ctx, c.ID); err != nil {
		t.Errorf("deleting a finished job: %v", err)
	}

	k1, _ := m.Submit(ctx, "download", nil, block)
	k2, _ := m.Submit(ctx, "download", nil, block)
	if _, err := m.Submit(ctx, "download", nil, block); !errors.Is(err, ErrTooMany) {
		t.Errorf("a third job at once: %v", err)
	}
	if err := store.Delete(ctx, k1.ID); !errors.Is(err, ErrRunning) {
		t.Errorf("deleting a running job: %v", err)
	}
	if _, err := m.Cancel(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancelling an unknown job: %v", err)
	}
	m.Close()
	for _, id := range []string{k1.ID, k2.ID} {
		if got, _ := store.Get(id); got.State != Interrupted {
			t.Errorf("after Close: %+v", got)
		}
	}
	if _, err := m.Submit(ctx, "download", nil, block); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after Close: %v", err)
	}
}

// TestRestart: a lone node's records survive in their file, and the next
// start marks the jobs the last run left running interrupted (a killed
// node never recorded their end), leaving other nodes' jobs alone.
func TestRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.json")
	store, err := OpenMemStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for _, j := range []Job{
		{ID: "left", Kind: "download", Node: "a", State: Running, Created: now, Updated: now},
		{ID: "done", Kind: "download", Node: "a", State: Done, Created: now, Updated: now},
		{ID: "other", Kind: "download", Node: "b", State: Running, Created: now, Updated: now},
	} {
		if err := store.Put(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	// The process dies here; the next one opens the file.
	again, err := OpenMemStore(path)
	if err != nil {
		t.Fatal(err)
	}
	newManager(t, again, "a")
	for id, want := range map[string]string{"left": Interrupted, "done": Done, "other": Running} {
		if j, _ := again.Get(id); j.State != want {
			t.Errorf("%s: %s, want %s", id, j.State, want)
		}
	}
	if err := again.Put(ctx, Job{ID: "left", Kind: "download", Node: "a", State: Running}); !errors.Is(err, ErrFinished) {
		t.Errorf("reviving an interrupted job: %v", err)
	}
	b, _ := os.ReadFile(path)
	var list []Job
	if err := json.Unmarshal(b, &list); err != nil || len(list) != 3 {
		t.Errorf("file: %v %d", err, len(list))
	}
}

// TestResultLimit: a result within the manager's MaxResultBytes is
// recorded; one over it fails the job with an error naming its size and
// the limit, never a done job without its result.
func TestResultLimit(t *testing.T) {
	store, err := OpenMemStore("")
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Node: "a", Store: store, ProgressEvery: 10 * time.Millisecond, MaxResultBytes: 64})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	for _, tc := range []struct {
		size      int // of the result's string; its JSON is 2 bytes more
		state     string
		errSays   string
		hasResult bool
	}{
		{62, Done, "", true},
		{63, Failed, "the job's result is 65 bytes, over the limit of 64 bytes", false},
	} {
		j, err := m.Submit(context.Background(), "quantize", nil, func(context.Context, *Reporter) (any, error) {
			return strings.Repeat("x", tc.size), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := waitState(t, store, j.ID, func(j Job) bool { return Final(j.State) })
		if got.State != tc.state || !strings.Contains(got.Error, tc.errSays) || (len(got.Result) > 0) != tc.hasResult {
			t.Errorf("a result of %d bytes: %+v, want %s saying %q", tc.size+2, got, tc.state, tc.errSays)
		}
	}
}
