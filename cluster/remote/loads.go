package remote

import (
	"context"
	"sync"
	"time"
)

// Loads follows the Stats streams of peers and keeps the latest report of
// each, by address: the live load the routing table gives the dispatcher.
// A stream that breaks is opened again (every interval) until Forget or
// Close. It is safe for concurrent use.
type Loads struct {
	pool     *Pool
	interval time.Duration

	mu     sync.Mutex
	peers  map[string]*follow
	closed bool
	wg     sync.WaitGroup
}

type follow struct {
	cancel context.CancelFunc
	last   PeerStats
	seen   time.Time // when last arrived (our clock, not the peer's)
}

// NewLoads returns a follower that dials through pool and asks for a
// report every interval (0: DefaultStatsInterval).
func NewLoads(pool *Pool, interval time.Duration) *Loads {
	if interval <= 0 {
		interval = DefaultStatsInterval
	}
	return &Loads{pool: pool, interval: interval, peers: map[string]*follow{}}
}

// Watch starts following the peer at addr; watching it again does nothing.
func (l *Loads) Watch(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.peers[addr] != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &follow{cancel: cancel}
	l.peers[addr] = f
	l.wg.Go(func() { l.run(ctx, addr, f) })
}

func (l *Loads) run(ctx context.Context, addr string, f *follow) {
	for ctx.Err() == nil {
		c, err := l.pool.Client(addr)
		if err == nil {
			_ = c.WatchStats(ctx, l.interval, func(s PeerStats) {
				l.mu.Lock()
				f.last, f.seen = s, time.Now()
				l.mu.Unlock()
			})
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.interval):
		}
	}
}

// Get returns the latest report of the peer at addr; ok is false when
// there is none younger than three intervals (the peer went quiet).
func (l *Loads) Get(addr string) (s PeerStats, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.peers[addr]
	if f == nil || f.seen.IsZero() || time.Since(f.seen) > 3*l.interval {
		return PeerStats{}, false
	}
	return f.last, true
}

// Load is the peer's in-flight plus queued generations (0 when unknown).
func (l *Loads) Load(addr string) int64 {
	s, _ := l.Get(addr)
	return s.InFlight + s.Queued
}

// Forget stops following the peer at addr.
func (l *Loads) Forget(addr string) {
	l.mu.Lock()
	f := l.peers[addr]
	delete(l.peers, addr)
	l.mu.Unlock()
	if f != nil {
		f.cancel()
	}
}

// Close stops following every peer and waits for the streams to end.
func (l *Loads) Close() {
	l.mu.Lock()
	l.closed = true
	for addr, f := range l.peers {
		f.cancel()
		delete(l.peers, addr)
	}
	l.mu.Unlock()
	l.wg.Wait()
}
