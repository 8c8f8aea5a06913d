// Package servedby tells the client which node ran its request: the
// dispatcher reports the node into the request's context when a
// generation is admitted, and the middleware writes the X-Fusion-Node
// header before the first byte of the answer. The dialect handlers know
// nothing of it.
package servedby

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Header is the response header naming the node(s) that ran the request.
const Header = "X-Fusion-Node"

type key struct{}

// recorder collects the nodes a request runs on, one entry per report (an
// answer with n choices may run them on several nodes).
type recorder struct {
	mu    sync.Mutex
	nodes []string
}

// With returns ctx carrying an empty record.
func With(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, &recorder{})
}

// Report notes that node runs (part of) the request of ctx. Without a
// record in ctx it does nothing.
func Report(ctx context.Context, node string) {
	r, _ := ctx.Value(key{}).(*recorder)
	if r == nil || node == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, node)
}

// Replace changes one report of old into new: a generation that moved to
// another node before anything was sent.
func Replace(ctx context.Context, old, new string) {
	r, _ := ctx.Value(key{}).(*recorder)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range r.nodes {
		if n == old {
			r.nodes[i] = new
			return
		}
	}
	r.nodes = append(r.nodes, new)
}

// Nodes returns the distinct nodes reported so far, in order.
func Nodes(ctx context.Context) []string {
	r, _ := ctx.Value(key{}).(*recorder)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.nodes {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Middleware gives each request a record and, when the answer starts,
// sets the header to the reported nodes (comma-separated) if any.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := With(r.Context())
		next.ServeHTTP(&writer{ResponseWriter: w, ctx: ctx}, r.WithContext(ctx))
	})
}

// writer sets the header on the first WriteHeader or Write. Unwrap lets
// http.ResponseController reach Flush and deadlines.
type writer struct {
	http.ResponseWriter
	ctx     context.Context
	started bool
}

func (w *writer) start() {
	if w.started {
		return
	}
	w.started = true
	if nodes := Nodes(w.ctx); len(nodes) > 0 {
		w.Header().Set(Header, strings.Join(nodes, ","))
	}
}

func (w *writer) WriteHeader(code int) {
	if code >= 200 { // 1xx informational answers do not start the answer
		w.start()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(b)
}

// FlushError starts the answer too: a flush sends the headers.
func (w *writer) FlushError() error {
	w.start()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
