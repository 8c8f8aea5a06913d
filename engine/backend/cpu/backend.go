package cpu

import (
	"context"
	"runtime"
	"sync"

	"fusion/engine/backend"
	"fusion/engine/backend/cpu/kernels"
)

// Options configure a Backend.
type Options struct {
	// Threads is the number of goroutines a step computes on
	// (runtime.NumCPU() when 0 or less).
	Threads int
	// Kernels selects an instruction-set level (kernels.Default() when
	// nil).
	Kernels *kernels.Kernels
	// Dequantize widens every weight to a float32 copy at load, so that
	// matrix products are plain f32 dot products. Reference runs use it to
	// measure the error of the quantized kernels; it costs memory.
	Dequantize bool
	// ExactActivations makes GGUF products use the f32 activations
	// instead of quantizing them to 8 bits per block (the llama.cpp
	// scheme): each weight row is dequantized on the fly and multiplied in
	// f32, so a GGUF model matches its dequantized run up to summation
	// order, at the cost of speed. It has no effect on other formats.
	ExactActivations bool
}

// Backend is the CPU backend. It is safe for concurrent use; each Step is
// used by one goroutine.
type Backend struct {
	opts    Options
	threads int
	k       *kernels.Kernels
	pool    *kernels.Pool

	mu     sync.Mutex
	chunks [][]float32 // arena chunks free for the next step
}

var _ backend.Backend = (*Backend)(nil)

// New starts a CPU backend and its worker goroutines; Close stops them.
func New(opts Options) *Backend {
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	k := opts.Kernels
	if k == nil {
		k = kernels.Default()
	}
	return &Backend{opts: opts, threads: threads, k: k, pool: kernels.NewPool(threads, k)}
}

// Name is "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of goroutines a step computes on.
func (b *Backend) Threads() int { return b.threads }

// Kernels is the kernel set the backend runs.
func (b *Backend) Kernels() *kernels.Kernels { return b.k }

// NewStep starts a forward pass. The CPU backend computes eagerly, so ctx
// is only checked by Read and Eval.
func (b *Backend) NewStep(ctx context.Context) backend.Step {
	return newStep(ctx, b)
}

// Close stops the worker goroutines and drops the arena memory kept for
// reuse.
func (b *Backend) Close() error {
	b.pool.Close()
	b.mu.Lock()
	b.chunks = nil
	b.mu.Unlock()
	return nil
}

// takeChunks hands the free arena chunks to a new step.
func (b *Backend) takeChunks() [][]float32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.chunks
	b.chunks = nil
	return c
}

// putChunks returns a finished step's chunks, keeping the larger set.
func (b *Backend) putChunks(c [][]float32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if size(c) > size(b.chunks) {
		b.chunks = c
	}
}

func size(chunks [][]float32) int {
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	return n
}

// ArenaBytes is the memory kept between steps for activations.
func (b *Backend) ArenaBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return 4 * int64(size(b.chunks))
}

// parallel runs fn(worker, i) for i in [0, n) on the pool's goroutines
// (the caller's among them); worker < b.threads identifies the goroutine,
// for per-worker scratch memory. fn must not use the pool.
func (b *Backend) parallel(n int, fn func(worker, i int)) {
	b.pool.Run(n, fn)
}

// parallelRows splits rows [0, n) into contiguous ranges of at least
// minRows and runs fn on them in parallel.
func (b *Backend) parallelRows(n, minRows int, fn func(lo, hi int)) {
	parts := min(b.threads, max(1, n/max(minRows, 1)))
	if parts <= 1 {
		fn(0, n)
		return
	}
	b.parallel(parts, func(_, p int) {
		fn(p*n/parts, (p+1)*n/parts)
	})
}
