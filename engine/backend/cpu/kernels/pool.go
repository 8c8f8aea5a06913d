package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs matrix products and other parallel loops on a fixed set of
// goroutines: the caller plus threads-1 workers started by NewPool and
// stopped by Close. A Pool serializes its MatMul and Run calls (they share
// the workers and the activation buffers) and may be used from several
// goroutines.
//
// A decode step is a few hundred short parallel sections separated by
// microseconds of serial work, so waking a parked goroutine for each
// (tens of microseconds through the OS) would leave the cores idle a
// third of the time. Workers therefore spin (yielding to other goroutines
// on every turn) for the pool's spin time (DefaultSpin) after each job
// before they park, and the caller spins likewise while it waits for
// them; a job that finds a worker parked wakes it through a channel.
type Pool struct {
	k       *Kernels
	threads int
	spin    time.Duration
	workers []*poolWorker
	wg      sync.WaitGroup

	mu      sync.Mutex // held for a whole MatMul or Run
	closed  bool
	act     actBuf
	scratch []scratch // one per thread; [0] is the caller's

	// gen counts the published jobs; a worker that sees it change runs
	// cur (nil after Close). cur is written before gen is incremented.
	gen atomic.Uint64
	cur *job
	job job // the one job, reused: jobs never overlap
}

// poolWorker is one worker goroutine's parking state.
type poolWorker struct {
	index  int
	parked atomic.Bool
	wake   chan struct{} // capacity 1
}

// job is one parallel section: n items claimed in chunks with next by
// every goroutine of the pool, each calling body on its claims.
type job struct {
	n, chunk int
	next     atomic.Int64
	body     func(worker int, s *scratch, lo, hi int)

	// state is the number of workers that have not finished the job,
	// plus waitingBit once the caller parks on done. One word, so the
	// last worker's decrement alone tells it whether to signal: a second
	// access after the decrement could land in the next job.
	state atomic.Int32
	done  chan struct{}
}

const waitingBit = 1 << 30

// DefaultSpin is how long an idle worker spins before it parks.
const DefaultSpin = 200 * time.Microsecond

// NewPool starts a pool of threads goroutines (runtime.NumCPU() when
// threads <= 0) using kernels k (Default() when nil); its workers spin
// for DefaultSpin before parking.
func NewPool(threads int, k *Kernels) *Pool {
	return newPoolSpin(threads, k, DefaultSpin)
}

// newPoolSpin is NewPool with the workers' spin time (0: park at once);
// tests use it to exercise parking.
func newPoolSpin(threads int, k *Kernels, spin time.Duration) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	if k == nil {
		k = Default()
	}
	p := &Pool{
		k:       k,
		threads: threads,
		spin:    max(spin, 0),
		scratch: make([]scratch, threads),
	}
	p.job.done = make(chan struct{}, 1)
	for i := 1; i < threads; i++ {
		w := &poolWorker{index: i, wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go p.work(w)
	}
	return p
}

// Threads is the number of goroutines a product uses.
func (p *Pool) Threads() int { return p.threads }

// Kernels returns the kernels the pool runs.
func (p *Pool) Kernels() *Kernels { return p.k }

// Close stops the workers and waits for them to exit. MatMul and Run must
// not be called after Close; Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.cur = nil
	p.publish()
	p.wg.Wait()
}

// publish makes p.cur visible to the workers and wakes the parked ones.
func (p *Pool) publish() {
	p.gen.Add(1)
	for _, w := range p.workers {
		if w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
}

func (p *Pool) work(w *poolWorker) {
	defer p.wg.Done()
	var seen uint64 // the generation at NewPool: a job published before this goroutine starts must run
	for {
		seen = p.await(w, seen)
		j := p.cur
		if j == nil {
			return
		}
		j.run(w.index, &p.scratch[w.index])
		if j.state.Add(-1) == waitingBit {
			j.done <- struct{}{}
		}
	}
}

// await returns the generation after seen, spinning for p.spin and then
// parking until publish wakes the worker.
//
// A publish that found the worker parked sends one token; the worker
// consumes exactly the tokens of the parks a publish ended. A publish can
// be slow to reach the worker, which may meanwhile have run that job and
// parked again: the token then ends the new park with no new job, so the
// worker checks the generation and parks again.
func (p *Pool) await(w *poolWorker, seen uint64) uint64 {
	deadline := time.Now().Add(p.spin)
	for spins := 0; ; spins++ {
		if g := p.gen.Load(); g != seen {
			return g
		}
		if spins%16 == 15 && time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	for {
		w.parked.Store(true)
		if g := p.gen.Load(); g != seen {
			if !w.parked.CompareAndSwap(true, false) {
				<-w.wake // a publish saw us parked and is sending
			}
			return g
		}
		<-w.wake
		if g := p.gen.Load(); g != seen {
			return g
		}
	}
}

func (j *job) run(worker int, s *scratch) {
	for {
		lo := int(j.next.Add(int64(j.chunk))) - j.chunk
		if lo >= j.n {
			return
		}
		j.body(worker, s, lo, min(lo+j.chunk, j.n))
	}
}

// do runs body over [0, n) in chunks on every goroutine of the pool and
// returns when all of them are done with it. p.mu must be held.
func (p *Pool) do(n, chunk int, body func(worker int, s *scratch, lo, hi int)) {
	if p.closed {
		panic("kernels: Pool used after Close")
	}
	j := &p.job
	j.n, j.chunk, j.body = n, chunk, body
	j.next.Store(0)
	j.state.Store(int32(len(p.workers)))
	p.cur = j
	p.publish()
	defer p.wait(j) // also when the caller's share panics: the job is reused
	j.run(0, &p.scratch[0])
}

// wait returns once every worker is done with j, spinning for p.spin
// and then parking until the last worker signals.
func (p *Pool) wait(j *job) {
	deadline := time.Now().Add(p.spin)
	for spins := 0; j.state.Load() != 0; spins++ {
		if spins%16 == 15 && time.Now().After(deadline) {
			if j.state.Or(waitingBit) != 0 {
				<-j.done // the last worker will see the bit and signal
			}
			break
		}
		runtime.Gosched()
	}
	j.body = nil // don't keep the caller's closure alive
}

// Run calls fn(worker, i) for every i in [0, n) on the pool's goroutines,
// the caller's among them, and returns when all calls have returned.
// worker < Threads() identifies the goroutine (for per-goroutine scratch
// memory); fn must not use the pool itself.
func (p *Pool) Run(n int, fn func(worker, i int)) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.threads == 1 || n == 1 {
		if p.closed {
			panic("kernels: Pool used after Close")
		}
		for i := range n {
			fn(0, i)
		}
		return
	}
	p.do(n, 1, func(worker int, _ *scratch, lo, hi int) {
		for i := lo; i < hi; i++ {
			fn(worker, i)
		}
	})
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
	if p.threads == 1 || batch < 2*p.threads {
		w.prepareRows(k, &p.act, 0, batch)
	} else {
		// Quantizing or permuting a prompt's activations is worth splitting.
		p.do(batch, 1, func(_ int, _ *scratch, lo, hi int) {
			w.prepareRows(k, &p.act, lo, hi)
		})
	}
	rows := w.Rows()
	if p.threads == 1 || rows < 2*minChunk {
		w.mulRows(k, &p.act, dst, 0, rows, &p.scratch[0])
		return
	}
	// About eight chunks per goroutine balances load on a busy machine,
	// but a product of one to three activation rows is a stream through
	// the weights, and every chunk a goroutine jumps to restarts the
	// hardware prefetcher: two chunks each there (decode +7% on the
	// Q4_K_M benchmark model, 2 cores).
	per := 8
	if batch < 4 {
		per = 2
	}
	chunk := max(minChunk, (rows+per*p.threads-1)/(per*p.threads))
	if a, ok := w.(interface{ rowAlign() int }); ok {
		chunk = (chunk + a.rowAlign() - 1) / a.rowAlign() * a.rowAlign()
	}
	p.do(rows, chunk, func(_ int, s *scratch, lo, hi int) {
		w.mulRows(k, &p.act, dst, lo, hi, s)
	})
}

// minChunk is the fewest rows worth handing to another goroutine.
const minChunk = 16
