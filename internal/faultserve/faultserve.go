// Package faultserve is the fault injection the test stand-ins for model
// hubs (internal/hubtest, internal/mstest) share: it records every
// request, counts the bytes of every file download, can pace downloads
// to a byte rate (to stop one half way), and can corrupt the next answer
// for a file once. A server embeds Faults and routes its file bodies
// through Reader or Writer.
package faultserve

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// chunk is the most a paced download sends between two rate checks.
const chunk = 16 << 10

// Faults is the fault state of one test server; the zero value injects
// nothing. Its methods are safe for concurrent use.
type Faults struct {
	mu       sync.Mutex
	fetched  map[string]int64 // bytes of file downloads by file key ("org/name/path")
	corrupt  map[string]bool  // file key → corrupt its next answer
	throttle int64            // bytes per second of file downloads (0: none)
	requests []string         // every request, in order
}

// Throttle caps file downloads at bytesPerSecond (0: no cap).
func (f *Faults) Throttle(bytesPerSecond int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle = bytesPerSecond
}

// CorruptNext flips one byte of the next download of path ("org/name/file").
func (f *Faults) CorruptNext(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.corrupt == nil {
		f.corrupt = map[string]bool{}
	}
	f.corrupt[path] = true
}

// Fetched is the bytes of path ("org/name/file") sent so far.
func (f *Faults) Fetched(path string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetched[path]
}

// Requests lists the requests recorded so far, in order.
func (f *Faults) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// Record appends one request line (what Requests lists).
func (f *Faults) Record(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, line)
}

// TakeCorrupt reports whether path's next answer is to be corrupted, and
// clears the order: a corruption applies once.
func (f *Faults) TakeCorrupt(path string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.corrupt[path]
	delete(f.corrupt, path)
	return c
}

func (f *Faults) rate() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.throttle
}

func (f *Faults) count(path string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fetched == nil {
		f.fetched = map[string]int64{}
	}
	f.fetched[path] += int64(n)
}

// pacer holds one download to the throttle: before each chunk it waits
// until the bytes sent so far are due at the rate.
type pacer struct {
	f     *Faults
	start time.Time
	n     int64 // bytes sent
}

// next returns how much of want bytes may go now, after waiting for it;
// paced is whether a throttle applies.
func (p *pacer) next(want int) (n int, paced bool) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	rate := p.f.rate()
	if rate <= 0 {
		return want, false
	}
	if ahead := time.Duration(float64(p.n)/float64(rate)*float64(time.Second)) - time.Since(p.start); ahead > 0 {
		time.Sleep(ahead)
	}
	return min(want, chunk), true
}

// Reader relays the body of a download of path, counting (and maybe
// pacing) its bytes; if path's corruption was ordered, the first byte
// read is flipped.
func (f *Faults) Reader(path string, r io.ReadCloser) io.ReadCloser {
	return &reader{p: pacer{f: f}, path: path, r: r, corrupt: f.TakeCorrupt(path)}
}

type reader struct {
	p       pacer
	path    string
	r       io.ReadCloser
	corrupt bool
}

func (c *reader) Read(b []byte) (int, error) {
	n, _ := c.p.next(len(b))
	n, err := c.r.Read(b[:n])
	if n > 0 && c.corrupt {
		b[0] ^= 0xff
		c.corrupt = false
	}
	c.p.n += int64(n)
	c.p.f.count(c.path, n)
	return n, err
}

func (c *reader) Close() error { return c.r.Close() }

// Writer wraps the response of a download of path, counting (and maybe
// pacing, flushing each paced chunk) the body bytes written through it.
// Corruption is the caller's (TakeCorrupt), as it knows where the body
// starts.
func (f *Faults) Writer(path string, w http.ResponseWriter) http.ResponseWriter {
	return &writer{ResponseWriter: w, p: pacer{f: f}, path: path}
}

type writer struct {
	http.ResponseWriter
	p    pacer
	path string
}

func (c *writer) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n, paced := c.p.next(len(b))
		n, err := c.ResponseWriter.Write(b[:n])
		c.p.n += int64(n)
		written += n
		c.p.f.count(c.path, n)
		if err != nil {
			return written, err
		}
		if paced {
			if fl, ok := c.ResponseWriter.(http.Flusher); ok {
				fl.Flush()
			}
		}
		b = b[n:]
	}
	return written, nil
}
