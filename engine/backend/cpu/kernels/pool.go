package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool runs matrix products on a fixed set of goroutines: the caller plus
// threads-1 workers started by NewPool and stopped by Close. A Pool
// serializes its MatMul calls (they share the workers and the activation
// buffers) and may be used from several goroutines.
type Pool struct {
	k       *Kernels
	threads int
	jobs    chan *job
	workers sync.WaitGroup

	mu      sync.Mutex // held for a whole MatMul
	closed  bool
	act     actBuf
	scratch []scratch // one per thread; [0] is the caller's
}

// job is one MatMul split into chunks of rows claimed with next.
type job struct {
	w     Weights
	k     *impl
	a     *actBuf
	dst   []float32
	rows  int
	chunk int
	next  atomic.Int64
	done  sync.WaitGroup
}

// NewPool starts a pool of threads goroutines (runtime.NumCPU() when
// threads <= 0) using kernels k (Default() when nil).
func NewPool(threads int, k *Kernels) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	if k == nil {
		k = Default()
	}
	p := &Pool{
		k:       k,
		threads: threads,
		jobs:    make(chan *job, threads),
		scratch: make([]scratch, threads),
	}
	for i := 1; i < threads; i++ {
		p.workers.Add(1)
		go p.worker(&p.scratch[i])
	}
	return p
}

// Threads is the number of goroutines a product uses.
func (p *Pool) Threads() int { return p.threads }

// Kernels returns the kernels the pool runs.
func (p *Pool) Kernels() *Kernels { return p.k }

// Close stops the workers and waits for them to exit. MatMul must not be
// called after Close; Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.jobs)
	p.workers.Wait()
}

func (p *Pool) worker(s *scratch) {
	defer p.workers.Done()
	for j := range p.jobs {
		j.run(s)
		j.done.Done()
	}
}

func (j *job) run(s *scratch) {
	for {
		r0 := int(j.next.Add(int64(j.chunk))) - j.chunk
		if r0 >= j.rows {
			return
		}
		j.w.mulRows(j.k, j.a, j.dst, r0, min(r0+j.chunk, j.rows), s)
	}
}

// MatMul is Kernels.MatMul with the output rows split across the pool's
// goroutines. It panics if the pool is closed or the slices are too short.
func (p *Pool) MatMul(dst, x []float32, batch int, w Weights) {
	checkMatMul(dst, x, batch, w)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		panic("kernels: MatMul on a closed Pool")
	}
	k := &p.k.impl
	w.prepare(k, x[:batch*w.Cols()], batch, &p.act)
	defer func() { p.act.x = nil }() // don't keep the caller's x alive
	rows := w.Rows()
	helpers := min(p.threads, (rows+minChunk-1)/minChunk) - 1
	if helpers <= 0 {
		w.mulRows(k, &p.act, dst, 0, rows, &p.scratch[0])
		return
	}
	// About eight chunks per goroutine balances load on a busy machine.
	chunk := max(minChunk, (rows+8*p.threads-1)/(8*p.threads))
	j := &job{w: w, k: k, a: &p.act, dst: dst, rows: rows, chunk: chunk}
	j.done.Add(helpers)
	for range helpers {
		p.jobs <- j
	}
	j.run(&p.scratch[0])
	j.done.Wait()
}

// minChunk is the fewest rows worth handing to another goroutine.
const minChunk = 16
