package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"fusion/engine"
)

// splitNodes lists the usable nodes that have model ready or, when the
// table knows (BackendTable's Holders), on disk: the nodes a batch of
// independent work (images of one request, pieces of a transcription)
// can be split across. This node comes first, then by id.
func (d *Dispatcher) splitNodes(model string) []Peer {
	ps := usable(d.cfg.Table.Candidates(model))
	if bt, ok := d.cfg.Table.(BackendTable); ok {
		ps = append(ps, usable(bt.Holders(model))...)
	}
	self := d.cfg.Table.Self()
	slices.SortFunc(ps, func(a, b Peer) int {
		if (a.ID == self) != (b.ID == self) {
			if a.ID == self {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return slices.CompactFunc(ps, func(a, b Peer) bool { return a.ID == b.ID })
}

// imageShare is a node's part of a split batch: count images from first
// (within the request).
type imageShare struct {
	node         Peer
	first, count int
}

// shareImages splits n images over at most len(nodes) nodes, as evenly
// as it goes, the first nodes taking one more.
func shareImages(n int, nodes []Peer) []imageShare {
	k := min(n, len(nodes))
	out := make([]imageShare, k)
	first := 0
	for j := range out {
		c := n / k
		if j < n%k {
			c++
		}
		out[j] = imageShare{node: nodes[j], first: first, count: c}
		first += c
	}
	return out
}

// splitImages runs the request's images on several nodes at once, each
// making its share of the one batch (engine.ImageRequest First and
// Total: the same seed gives the same images as on one node), and joins
// them in order. Steps from the nodes reach req.OnStep one at a time,
// numbered by image in the batch. A share whose node refuses it before
// its first step (overloaded, gone) runs where a whole request would;
// any other failure cancels the other shares and is the request's.
func (d *Dispatcher) splitImages(ctx context.Context, req *engine.ImageRequest, nodes []Peer) (*engine.ImageResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	total := req.Total
	if total == 0 {
		total = req.N
	}
	shares := shareImages(req.N, nodes)
	res := &engine.ImageResult{PNG: make([][]byte, req.N)}
	var (
		mu    sync.Mutex // serializes req.OnStep, guards first
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	for _, sh := range shares {
		r := *req
		r.First, r.N, r.Total = req.First+sh.first, sh.count, total
		sent := false
		if req.OnStep != nil {
			r.OnStep = func(s engine.ImageStep) {
				mu.Lock()
				defer mu.Unlock()
				sent = true
				req.OnStep(s)
			}
		}
		wg.Go(func() {
			out, err := d.imageOn(ctx, sh.node, &r)
			mu.Lock()
			again := err != nil && !sent && retryable(err) && ctx.Err() == nil
			mu.Unlock()
			if again {
				d.cfg.Logger.Warn("dispatch: image share refused, running it elsewhere", "node", sh.node.ID, "err", err)
				out, err = d.generateImage(ctx, &r)
			}
			if err == nil && len(out.PNG) != r.N {
				err = fmt.Errorf("%w: node %s made %d images of %d", engine.ErrUnavailable, sh.node.ID, len(out.PNG), r.N)
			}
			if err != nil {
				fail(fmt.Errorf("images %d to %d of %d on node %s: %w", sh.first+1, sh.first+sh.count, req.N, sh.node.ID, err))
				return
			}
			copy(res.PNG[sh.first:], out.PNG)
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return res, nil
}

// imageOn runs req on node: the local engine for this node, else the
// peer's Engine service.
func (d *Dispatcher) imageOn(ctx context.Context, node Peer, req *engine.ImageRequest) (*engine.ImageResult, error) {
	g, err := d.engineOn(node)
	if err != nil {
		return nil, err
	}
	ig, ok := g.(engine.ImageGenerator)
	if !ok {
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return ig.GenerateImage(ctx, req)
}

// imageFiler is a peer's engine that keeps url results (remote.Client).
type imageFiler interface {
	ImageFile(ctx context.Context, id string) (*engine.ImageFile, error)
}

// FetchImageFile fetches url result id from node, a peer of the cluster
// (the node that answered the generation): engine.ErrImageFileNotFound
// when node is this one, is not a peer, or does not have it;
// ErrUnavailable when it cannot be reached.
func (d *Dispatcher) FetchImageFile(ctx context.Context, node, id string) (*engine.ImageFile, error) {
	if node == d.cfg.Table.Self() {
		return nil, fmt.Errorf("%w: %s", engine.ErrImageFileNotFound, id)
	}
	for _, p := range d.cfg.Table.Peers() {
		if p.ID != node {
			continue
		}
		gen, err := d.cfg.Connect.Engine(p.Addr)
		if err != nil {
			return nil, fmt.Errorf("%w: node %s: %v", engine.ErrUnavailable, node, err)
		}
		f, ok := gen.(imageFiler)
		if !ok {
			return nil, fmt.Errorf("%w: node %s does not serve image files", engine.ErrImageFileNotFound, node)
		}
		return f.ImageFile(ctx, id)
	}
	return nil, fmt.Errorf("%w: %s (node %s is not in the cluster)", engine.ErrImageFileNotFound, id, node)
}

var _ engine.ImageFileFetcher = (*Dispatcher)(nil)
