package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"fusion/engine"
)

// DefaultEmbedBatchTokens bounds one encoder pass of an embedding model.
const DefaultEmbedBatchTokens = 4096

// embedBatcher runs the inputs of every embeddings request of one model
// through its encoder: whatever is waiting when a pass ends, from any
// number of requests, is sorted by length and cut into passes of at most
// maxTokens padded tokens (inputs × the longest input of the pass), so
// concurrent requests share passes. One goroutine runs the passes, one at
// a time, until stop.
type embedBatcher struct {
	// forward runs one pass: a vector per sequence (types: each one's
	// token type ids, nil entries for none); output turns a vector into
	// what one request asked for (dims), in place.
	forward   func(seqs, types [][]int) ([][]float32, error)
	output    func(v []float32, dims int) []float32
	maxTokens int
	stats     *embedStats

	mu      sync.Mutex
	queue   []embedItem
	stopped bool
	wake    chan struct{} // a token when the queue got items
	stop    chan struct{}
	done    chan struct{}
}

// embedStats counts the work of every embedding model of a runner.
type embedStats struct {
	passes atomic.Int64 // encoder passes run
	inputs atomic.Int64 // inputs embedded
}

// EmbedStats are the counters of the embeddings batcher.
type EmbedStats struct {
	Passes int64 // encoder passes run
	Inputs int64 // inputs embedded (Inputs/Passes is the mean batch)
}

// EmbedStats returns the batcher's counters, all models together.
func (r *Runner) EmbedStats() EmbedStats {
	return EmbedStats{Passes: r.embedStats.passes.Load(), Inputs: r.embedStats.inputs.Load()}
}

// embedItem is one input of a request waiting for its pass.
type embedItem struct {
	seq   []int
	types []int // token type ids (nil: all 0)
	call  *embedCall
	idx   int // the input's place in the request
}

// embedCall is one request's share of the batcher's work. Only the
// batcher's goroutine writes it until done is closed.
type embedCall struct {
	ctx  context.Context
	dims int
	out  [][]float32
	left int
	err  error
	done chan struct{}
}

func newEmbedBatcher(forward func(seqs, types [][]int) ([][]float32, error), output func([]float32, int) []float32,
	maxTokens int, stats *embedStats) *embedBatcher {
	b := &embedBatcher{forward: forward, output: output, maxTokens: maxTokens, stats: stats,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// embed queues the sequences of one request (types: nil, or each
// sequence's token type ids) and waits for their vectors (or for ctx to
// end: its inputs not yet run are then skipped).
func (b *embedBatcher) embed(ctx context.Context, seqs, types [][]int, dims int) ([][]float32, error) {
	c := &embedCall{ctx: ctx, dims: dims, out: make([][]float32, len(seqs)), left: len(seqs), done: make(chan struct{})}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: the model is unloading", engine.ErrUnavailable)
	}
	for i, s := range seqs {
		it := embedItem{seq: s, call: c, idx: i}
		if types != nil {
			it.types = types[i]
		}
		b.queue = append(b.queue, it)
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close stops the goroutine after its pass; requests still queued fail.
func (b *embedBatcher) close() {
	close(b.stop)
	<-b.done
}

func (b *embedBatcher) run() {
	defer close(b.done)
	for {
		select {
		case <-b.stop:
			b.mu.Lock()
			b.stopped = true
			rest := b.queue
			b.queue = nil
			b.mu.Unlock()
			fail(rest, fmt.Errorf("%w: the model is unloading", engine.ErrUnavailable))
			return
		case <-b.wake:
		}
		for {
			b.mu.Lock()
			items := b.queue
			b.queue = nil
			b.mu.Unlock()
			if len(items) == 0 {
				break
			}
			b.runAll(items)
		}
	}
}

// runAll runs items in passes: sorted by length, each pass as many as fit
// in maxTokens padded tokens. The items of requests that went away are
// dropped.
func (b *embedBatcher) runAll(items []embedItem) {
	items = slices.DeleteFunc(items, func(it embedItem) bool { return it.call.ctx.Err() != nil || it.call.err != nil })
	slices.SortStableFunc(items, func(x, y embedItem) int { return cmp.Compare(len(x.seq), len(y.seq)) })
	for lo := 0; lo < len(items); {
		hi := lo + 1 // sorted: the last input of a pass is its longest
		for hi < len(items) && (hi+1-lo)*len(items[hi].seq) <= b.maxTokens {
			hi++
		}
		b.pass(items[lo:hi])
		lo = hi
	}
}

// pass runs one encoder pass and hands each vector to its request.
func (b *embedBatcher) pass(items []embedItem) {
	items = slices.DeleteFunc(slices.Clone(items), func(it embedItem) bool { return it.call.ctx.Err() != nil || it.call.err != nil })
	if len(items) == 0 {
		return
	}
	seqs, types := make([][]int, len(items)), make([][]int, len(items))
	for i, it := range items {
		seqs[i], types[i] = it.seq, it.types
	}
	// The pass serves several requests: one going away must not stop it.
	vecs, err := b.forward(seqs, types)
	b.stats.passes.Add(1)
	if err != nil {
		fail(items, err)
		return
	}
	b.stats.inputs.Add(int64(len(items)))
	for i, it := range items {
		c := it.call
		c.out[it.idx] = b.output(vecs[i], c.dims)
		if c.left--; c.left == 0 {
			close(c.done)
		}
	}
}

// fail ends the requests of items with err (once each).
func fail(items []embedItem, err error) {
	for _, it := range items {
		if c := it.call; c.err == nil && c.left > 0 {
			c.err = err
			close(c.done)
		}
	}
}
