// Package netsim simulates slow network links for tests and benchmarks:
// network namespaces joined by veth pairs, the bandwidth limited with tc's
// tbf, and a one-way delay added either by tc's netem (where the kernel
// has it) or by a delaying TCP relay of its own.
package netsim

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// DialFunc opens a connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Relay forwards every connection it accepts to a target, holding each
// chunk read in either direction for Delay before writing it on, in
// order: a link whose round trip is 2 × Delay longer, with no bandwidth
// limit of its own.
type Relay struct {
	lis    net.Listener
	target string
	dial   DialFunc
	delay  time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// NewRelay serves lis, dialling target through dial (nil: a plain
// net.Dialer) for every connection accepted, until Close.
func NewRelay(lis net.Listener, target string, dial DialFunc, delay time.Duration) *Relay {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{lis: lis, target: target, dial: dial, delay: delay, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	return r
}

// Addr is the address the relay listens on.
func (r *Relay) Addr() string { return r.lis.Addr().String() }

// Delay is the one-way delay the relay adds.
func (r *Relay) Delay() time.Duration { return r.delay }

// Close stops accepting, closes every relayed connection and waits for
// the relay's goroutines.
func (r *Relay) Close() error {
	r.cancel()
	err := r.lis.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

// track records c for Close (false: the relay is closing; c is closed).
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *Relay) accept() {
	for {
		in, err := r.lis.Accept()
		if err != nil {
			return
		}
		if !r.track(in) {
			return
		}
		r.wg.Go(func() { r.serve(in) })
	}
}

// serve relays in to a new connection to the target until either side
// ends or the relay closes.
func (r *Relay) serve(in net.Conn) {
	defer r.untrack(in)
	out, err := r.dial(r.ctx, "tcp", r.target)
	if err != nil {
		return
	}
	if !r.track(out) {
		return
	}
	defer r.untrack(out)
	var wg sync.WaitGroup
	wg.Go(func() { r.pump(in, out) })
	wg.Go(func() { r.pump(out, in) })
	wg.Wait()
}

// chunk is data read at a time, due to be written at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst, each chunk Delay after it was read. When src
// ends, dst's write side is closed once the chunks before are written;
// when either fails, both connections are closed.
func (r *Relay) pump(src, dst net.Conn) {
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(0)
		defer t.Stop()
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				t.Reset(d)
				select {
				case <-t.C:
				case <-r.ctx.Done():
					return
				}
			}
			if c.data == nil { // src ended
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case q <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(r.delay)}:
			case <-done: // the writer failed
				close(q)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				select {
				case q <- chunk{due: time.Now().Add(r.delay)}:
				case <-done:
				}
			} else {
				dst.Close()
			}
			close(q)
			<-done
			return
		}
	}
}
