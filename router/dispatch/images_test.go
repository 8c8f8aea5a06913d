package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/router/dispatch"
)

// batchEngine makes fake images: image i of a batch of total is the
// bytes "node:i/total"; each step is reported. It records the requests
// it got; fail, when set, is returned after failAfter steps (once
// failWait, if set, is closed); block holds it until its context ends,
// closing started when it begins and stopped when it ends.
type batchEngine struct {
	engine.Generator // nil: only GenerateImage is called
	id               string
	fail             error
	failAfter        int
	failWait         chan struct{}
	block            bool
	started          chan struct{}
	mu               sync.Mutex
	got              []engine.ImageRequest
	stopped          chan struct{}
}

func (e *batchEngine) GenerateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	e.mu.Lock()
	e.got = append(e.got, *req)
	e.mu.Unlock()
	total := max(req.Total, req.N)
	res := &engine.ImageResult{}
	steps := 0
	for i := range req.N {
		for s := 1; s <= req.Steps; s++ {
			if e.fail != nil && steps == e.failAfter {
				if e.failWait != nil {
					<-e.failWait
				}
				return nil, e.fail
			}
			if e.block {
				close(e.started)
				<-ctx.Done()
				close(e.stopped)
				return nil, ctx.Err()
			}
			if req.OnStep != nil {
				req.OnStep(engine.ImageStep{Image: req.First + i, Step: s, Steps: req.Steps})
			}
			steps++
		}
		res.PNG = append(res.PNG, fmt.Appendf(nil, "%s:%d/%d", e.id, req.First+i, total))
	}
	return res, nil
}

func (e *batchEngine) requests() []engine.ImageRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// fileSource is a node's store of url results.
type fileSource map[string]engine.ImageFile

func (s fileSource) ImageFile(id string) (engine.ImageFile, bool) { f, ok := s[id]; return f, ok }

// imagePeer serves e as node id's Engine service.
func imagePeer(t *testing.T, e *batchEngine, files fileSource) dispatch.Peer {
	t.Helper()
	srv := serveEngine(t, remote.ServerConfig{NodeID: e.id, Engine: e, ImageFiles: files, Logger: quiet})
	return dispatch.Peer{ID: e.id, Addr: srv.Addr(), Alive: true}
}

// imageCluster is node a (local engine) with peers b and c, all three
// ready with model "img".
func imageCluster(t *testing.T, b, c *batchEngine) (*dispatch.Dispatcher, *batchEngine) {
	a := &batchEngine{id: "a"}
	pb, pc := imagePeer(t, b, nil), imagePeer(t, c, nil)
	self := dispatch.Peer{ID: "a", Addr: "unused", Alive: true}
	tbl := &table{self: "a", ready: map[string][]dispatch.Peer{"img": {pc, self, pb}}, peers: []dispatch.Peer{pb, pc}}
	pool := remote.NewPool()
	t.Cleanup(func() { pool.Close() })
	return dispatch.New(dispatch.Config{Local: a, Table: tbl, Connect: pool, Logger: quiet}), a
}

// TestImagesSplitAcrossNodes: n = 4 over three nodes that have the model
// runs 2 here and 1 on each peer, each a share of the one batch (first,
// total), joined in order; steps come numbered by batch image; n = 1
// stays on one node.
func TestImagesSplitAcrossNodes(t *testing.T) {
	b, c := &batchEngine{id: "b"}, &batchEngine{id: "c"}
	d, a := imageCluster(t, b, c)
	var mu sync.Mutex
	seen := map[[2]int]int{}
	req := &engine.ImageRequest{Model: "img", Prompt: "x", N: 4, Steps: 2, Width: 16, Height: 16, Seed: 9,
		OnStep: func(s engine.ImageStep) { mu.Lock(); seen[[2]int{s.Image, s.Step}]++; mu.Unlock() }}
	res, err := d.GenerateImage(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range res.PNG {
		got = append(got, string(p))
	}
	if want := []string{"a:0/4", "a:1/4", "b:2/4", "c:3/4"}; !slices.Equal(got, want) {
		t.Errorf("images %q, want %q", got, want)
	}
	if len(seen) != 8 {
		t.Errorf("steps seen %v, want each of 4 images × 2 steps once", seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("step %v seen %d times", k, n)
		}
	}
	for _, e := range []*batchEngine{a, b, c} {
		for _, r := range e.requests() {
			if r.Total != 4 || r.Seed != 9 {
				t.Errorf("node %s got images [%d, %d) of %d, seed %d", e.id, r.First, r.First+r.N, r.Total, r.Seed)
			}
		}
	}
	one, err := d.GenerateImage(context.Background(), &engine.ImageRequest{Model: "img", Prompt: "x", N: 1, Steps: 1, Width: 16, Height: 16})
	if err != nil || len(one.PNG) != 1 || string(one.PNG[0]) != "a:0/1" {
		t.Errorf("n = 1: %q %v", one.PNG, err)
	}
}

// TestImagesSplitFailures: a share refused before its first step
// (overloaded) runs on another node; a node failing after steps fails the
// request at once, the other shares cancelled (no hang).
func TestImagesSplitFailures(t *testing.T) {
	b := &batchEngine{id: "b", fail: &engine.OverloadedError{Reason: "busy", RetryAfter: 1}}
	c := &batchEngine{id: "c"}
	d, _ := imageCluster(t, b, c)
	res, err := d.GenerateImage(context.Background(), &engine.ImageRequest{Model: "img", Prompt: "x", N: 3, Steps: 1, Width: 16, Height: 16,
		OnStep: func(engine.ImageStep) {}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.PNG[1]); got != "a:1/3" {
		t.Errorf("the refused share came back as %q, want it made here (a:1/3)", got)
	}

	c = &batchEngine{id: "c", block: true, started: make(chan struct{}), stopped: make(chan struct{})}
	b = &batchEngine{id: "b", fail: errors.New("gpu on fire"), failAfter: 1, failWait: c.started}
	d, _ = imageCluster(t, b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = d.GenerateImage(ctx, &engine.ImageRequest{Model: "img", Prompt: "x", N: 3, Steps: 2, Width: 16, Height: 16,
		OnStep: func(engine.ImageStep) {}})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("err %v (ctx %v), want node b's failure", err, ctx.Err())
	}
	select {
	case <-c.stopped:
	case <-ctx.Done():
		t.Fatal("node c's share was not cancelled")
	}
}

// TestFetchImageFile: a url result kept on a peer comes over its Engine
// service; an id it does not keep, a node not in the cluster and this
// node itself are ErrImageFileNotFound.
func TestFetchImageFile(t *testing.T) {
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	pb := imagePeer(t, &batchEngine{id: "b"}, fileSource{"img-1": {Data: []byte("png"), ContentType: "image/png", Expires: exp}})
	pool := remote.NewPool()
	t.Cleanup(func() { pool.Close() })
	d := dispatch.New(dispatch.Config{Local: &batchEngine{id: "a"}, Connect: pool, Logger: quiet,
		Table: &table{self: "a", peers: []dispatch.Peer{pb}}})
	f, err := d.FetchImageFile(context.Background(), "b", "img-1")
	if err != nil || string(f.Data) != "png" || f.ContentType != "image/png" || !f.Expires.Equal(exp) {
		t.Fatalf("%+v %v", f, err)
	}
	for _, c := range []struct{ node, id string }{{"b", "img-2"}, {"z", "img-1"}, {"a", "img-1"}} {
		if _, err := d.FetchImageFile(context.Background(), c.node, c.id); !errors.Is(err, engine.ErrImageFileNotFound) {
			t.Errorf("%s on %s: %v", c.id, c.node, err)
		}
	}
}
