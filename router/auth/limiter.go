package auth

import (
	"math"
	"net"
	"sync"
	"time"
)

// Counts are a key's requests and tokens.
type Counts struct {
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
}

func (c Counts) add(o Counts) Counts { return Counts{c.Requests + o.Requests, c.Tokens + o.Tokens} }

// KeyUsage is one node's use of one key: the current and previous minute
// windows (Window is the unix minute of Cur) and the total since the
// node started.
type KeyUsage struct {
	Window int64  `json:"window"`
	Cur    Counts `json:"cur"`
	Prev   Counts `json:"prev"`
	Total  Counts `json:"total"`
}

// Report is what a node tells its peers: its usage per key id.
type Report map[string]KeyUsage

// Limiter enforces the sub-keys' per-minute limits over a sliding window
// (two fixed minute windows, the previous one weighted by the part of it
// still inside the last 60 s). Each node counts what it admits; in a
// cluster every node adds the latest Report of each peer (SetPeer, fed by
// a periodic exchange), so a key's limit holds cluster-wide within what
// the other nodes admitted since their last report reached this one.
type Limiter struct {
	now   func() time.Time
	mu    sync.Mutex
	local map[string]*KeyUsage
	peers map[string]Report
}

// NewLimiter returns a limiter; now is the clock (nil: time.Now).
func NewLimiter(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, local: map[string]*KeyUsage{}, peers: map[string]Report{}}
}

// window returns the unix minute of t and how far into it t is (0..1).
func window(t time.Time) (int64, float64) {
	ns := t.UnixNano()
	w := ns / int64(time.Minute)
	return w, float64(ns-w*int64(time.Minute)) / float64(time.Minute)
}

// roll moves u to window w.
func (u *KeyUsage) roll(w int64) {
	switch {
	case u.Window == w:
	case u.Window == w-1:
		u.Prev, u.Cur = u.Cur, Counts{}
	default:
		u.Prev, u.Cur = Counts{}, Counts{}
	}
	u.Window = w
}

// estimate is u's use over the last minute at window w, fraction f.
func (u KeyUsage) estimate(w int64, f float64) (req, tok float64) {
	var cur, prev Counts
	switch u.Window {
	case w:
		cur, prev = u.Cur, u.Prev
	case w - 1:
		prev = u.Cur
	}
	return float64(cur.Requests) + float64(prev.Requests)*(1-f), float64(cur.Tokens) + float64(prev.Tokens)*(1-f)
}

// Admit decides one request of k and, admitted, counts it. A refusal
// comes with the seconds to wait (Retry-After): the rest of the current
// minute window.
func (l *Limiter) Admit(k *Key) (ok bool, retryAfter int) {
	if k.RequestsPerMin <= 0 && k.TokensPerMin <= 0 {
		l.add(k.ID, Counts{Requests: 1})
		return true, 0
	}
	now := l.now()
	w, f := window(now)
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.usage(k.ID, w)
	req, tok := u.estimate(w, f)
	for _, p := range l.peers {
		if pu, ok := p[k.ID]; ok {
			r, t := pu.estimate(w, f)
			req, tok = req+r, tok+t
		}
	}
	if (k.RequestsPerMin > 0 && req+1 > float64(k.RequestsPerMin)+1e-9) || (k.TokensPerMin > 0 && tok >= float64(k.TokensPerMin)) {
		return false, max(1, int(math.Ceil((1-f)*60)))
	}
	u.Cur.Requests++
	u.Total.Requests++
	return true, 0
}

// AddTokens counts tokens used by a request of key id (after it ran: a
// request in flight can take a key past its token limit once).
func (l *Limiter) AddTokens(id string, n int64) {
	if n > 0 {
		l.add(id, Counts{Tokens: n})
	}
}

func (l *Limiter) add(id string, c Counts) {
	w, _ := window(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.usage(id, w)
	u.Cur = u.Cur.add(c)
	u.Total = u.Total.add(c)
}

// usage returns id's local usage rolled to window w; l.mu is held.
func (l *Limiter) usage(id string, w int64) *KeyUsage {
	u := l.local[id]
	if u == nil {
		u = &KeyUsage{Window: w}
		l.local[id] = u
	}
	u.roll(w)
	return u
}

// Report returns this node's usage, for its peers.
func (l *Limiter) Report() Report {
	w, _ := window(l.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	r := make(Report, len(l.local))
	for id, u := range l.local {
		u.roll(w)
		r[id] = *u
	}
	return r
}

// SetPeer records the latest report of a peer node.
func (l *Limiter) SetPeer(node string, r Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peers[node] = r
}

// DropPeer forgets a peer that left.
func (l *Limiter) DropPeer(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.peers, node)
}

// Usage returns each key's requests and tokens since the nodes started:
// this node's plus the latest report of each peer. The stats endpoint
// reads it.
func (l *Limiter) Usage() map[string]Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]Counts, len(l.local))
	for id, u := range l.local {
		out[id] = u.Total
	}
	for _, p := range l.peers {
		for id, u := range p {
			out[id] = out[id].add(u.Total)
		}
	}
	return out
}

// FailLimiter limits failed authentication attempts per client address:
// after Max failures within Window, the address is refused (429) until
// the window ends. At most MaxAddrs addresses are tracked.
type FailLimiter struct {
	max, maxAddrs int
	window        time.Duration
	now           func() time.Time
	mu            sync.Mutex
	addrs         map[string]*failures
}

type failures struct {
	start time.Time
	n     int
}

// Defaults of the failed-attempts limit.
const (
	DefaultMaxFailures   = 20
	DefaultFailureWindow = time.Minute
	DefaultMaxAddrs      = 10000
)

// NewFailLimiter returns a limiter of max failures per window per
// address (max ≤ 0: never refuse); now is the clock (nil: time.Now).
func NewFailLimiter(max int, window time.Duration, now func() time.Time) *FailLimiter {
	if window <= 0 {
		window = DefaultFailureWindow
	}
	if now == nil {
		now = time.Now
	}
	return &FailLimiter{max: max, maxAddrs: DefaultMaxAddrs, window: window, now: now, addrs: map[string]*failures{}}
}

// Blocked reports whether addr is refused now, and for how many seconds.
func (f *FailLimiter) Blocked(addr string) (bool, int) {
	if f == nil || f.max <= 0 {
		return false, 0
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.addrs[addr]
	if e == nil || e.n < f.max {
		return false, 0
	}
	left := e.start.Add(f.window).Sub(now)
	if left <= 0 {
		delete(f.addrs, addr)
		return false, 0
	}
	return true, max(1, int(math.Ceil(left.Seconds())))
}

// Fail counts a failed attempt from addr.
func (f *FailLimiter) Fail(addr string) {
	if f == nil || f.max <= 0 {
		return
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.addrs[addr]
	if e != nil && now.Sub(e.start) >= f.window {
		e = nil
	}
	if e == nil {
		if len(f.addrs) >= f.maxAddrs {
			f.prune(now)
		}
		e = &failures{start: now}
		f.addrs[addr] = e
	}
	e.n++
}

// prune drops windows that ended; if none did, an arbitrary address (the
// table stays bounded; an attacker filling it only frees addresses).
func (f *FailLimiter) prune(now time.Time) {
	for a, e := range f.addrs {
		if now.Sub(e.start) >= f.window {
			delete(f.addrs, a)
		}
	}
	for a := range f.addrs {
		if len(f.addrs) < f.maxAddrs {
			break
		}
		delete(f.addrs, a)
	}
}

// clientAddr is the host of the request's remote address (proxies'
// forwarding headers are not trusted).
func clientAddr(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}
