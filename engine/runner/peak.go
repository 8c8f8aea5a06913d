package runner

import (
	"sync"
	"sync/atomic"
)

// notePeak records total as a candidate peak and returns the peak so far.
func (r *Runner) notePeak(total int64) int64 {
	for {
		p := r.peak.Load()
		if total <= p {
			return p
		}
		if r.peak.CompareAndSwap(p, total) {
			return total
		}
	}
}

// kvWatches are the KV high-water marks callers of WatchKV keep.
type kvWatches struct {
	n  atomic.Int64 // watches open: the step path skips the lock at 0
	mu sync.Mutex
	m  map[*atomic.Int64]struct{}
}

// note raises every open watch to total.
func (w *kvWatches) note(total int64) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.m {
		if total > p.Load() {
			p.Store(total)
		}
	}
}

// WatchKV starts recording the highest KV cache bytes held by running
// generations (every model of the runner, whoever asked for them); the
// function it returns stops recording and returns that high-water mark
// (at least the bytes held when the watch started). Benchmarks use it for
// a point's peak memory.
func (r *Runner) WatchKV() (stop func() int64) {
	p := new(atomic.Int64)
	w := &r.kvWatch
	w.mu.Lock()
	if w.m == nil {
		w.m = map[*atomic.Int64]struct{}{}
	}
	w.m[p] = struct{}{}
	w.n.Add(1)
	w.mu.Unlock()
	w.note(r.kvBytes.Load())
	var once sync.Once
	return func() int64 {
		once.Do(func() {
			w.mu.Lock()
			delete(w.m, p)
			w.n.Add(-1)
			w.mu.Unlock()
		})
		return p.Load()
	}
}
