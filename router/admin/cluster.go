package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"fusion/cluster/adminremote"
	"fusion/router/openai"
)

// Peers reaches the other nodes of a cluster (cluster/adminremote over
// the member's gRPC). A forwarded call runs the admin route of that node
// with ?node set to it, so it answers for that node alone.
type Peers interface {
	// Nodes lists the live nodes but this one, sorted by id.
	Nodes() []string
	// Forward runs call on node and returns its answer.
	Forward(ctx context.Context, node string, call Call) (Reply, error)
}

// Call is an admin request forwarded to one node, and Reply its answer
// (the cluster's admin service carries them).
type (
	Call  = adminremote.Call
	Reply = adminremote.Reply
)

// ErrUnknownNode is Forward's error for a node not in the cluster.
var ErrUnknownNode = fmt.Errorf("admin: unknown node")

// peerTimeout bounds one forwarded call of a cluster-wide read.
const peerTimeout = 5 * time.Second

// target is the node a request names with ?node ("" none, or this node).
func (h *Handler) target(r *http.Request) string {
	n := r.URL.Query().Get("node")
	if n == h.cfg.Self {
		return ""
	}
	return n
}

// local reports whether r must be answered by this node alone: it names
// this node, or the node is alone.
func (h *Handler) local(r *http.Request) bool {
	n := r.URL.Query().Get("node")
	return h.cfg.Peers == nil || (n != "" && n == h.cfg.Self)
}

// forwarded serves r on the node it names with ?node when that is another
// node, and reports whether it did. body is r's body already read (nil
// when it has none).
func (h *Handler) forwarded(w http.ResponseWriter, r *http.Request, body []byte) bool {
	node := h.target(r)
	if node == "" {
		return false
	}
	if h.cfg.Peers == nil || !slices.Contains(h.cfg.Peers.Nodes(), node) {
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "node", Code: "node_not_found",
			Message: fmt.Sprintf("No live node %q in this cluster.", node)})
		return true
	}
	rep, err := h.cfg.Peers.Forward(r.Context(), node, callOf(r, node, body))
	if err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: "server_error", Code: "node_unreachable",
			Message: fmt.Sprintf("Node %q did not answer: %v", node, err)})
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.Status)
	_, _ = w.Write(rep.Body)
	return true
}

// nodeFromBody makes a body's "node" r's ?node, unless r names one.
func nodeFromBody(r *http.Request, node string) {
	if node != "" && r.URL.Query().Get("node") == "" {
		q := r.URL.Query()
		q.Set("node", node)
		r.URL.RawQuery = q.Encode()
	}
}

// callOf is r as a call for node (its ?node set to node; its path kept
// escaped, so a model id ORG%2FNAME stays one path segment).
func callOf(r *http.Request, node string, body []byte) Call {
	q := r.URL.Query()
	q.Set("node", node)
	return Call{Method: r.Method, Path: r.URL.EscapedPath(), Query: q.Encode(), Body: body}
}

// nodeAnswer is one node's decoded answer of a cluster-wide call.
type nodeAnswer struct {
	node string
	body []byte
	err  error
}

// each runs call on every peer at once (each bounded by peerTimeout) and
// returns their answers by node id; a non-2xx answer is an error.
func (h *Handler) each(ctx context.Context, method, path string, query url.Values, body []byte) []nodeAnswer {
	if h.cfg.Peers == nil {
		return nil
	}
	nodes := h.cfg.Peers.Nodes()
	out := make([]nodeAnswer, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := url.Values{}
			for k, v := range query {
				q[k] = v
			}
			q.Set("node", n)
			cctx, cancel := context.WithTimeout(ctx, peerTimeout)
			defer cancel()
			rep, err := h.cfg.Peers.Forward(cctx, n, Call{Method: method, Path: path, Query: q.Encode(), Body: body})
			if err == nil && (rep.Status < 200 || rep.Status > 299) {
				err = fmt.Errorf("status %d: %s", rep.Status, bytes.TrimSpace(rep.Body))
			}
			out[i] = nodeAnswer{node: n, body: rep.Body, err: err}
		}()
	}
	wg.Wait()
	return out
}

// readBody reads r's body for forwarding (nil when empty).
func readBody(r *http.Request) ([]byte, *openai.Error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large", Message: err.Error()}
		}
		return nil, openai.InvalidRequest("", "Could not read the request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	return b, nil
}

// decodeStrict decodes a JSON object body into v, refusing unknown keys
// with a 400 naming the key.
func decodeStrict(body []byte, v any, known ...string) *openai.Error {
	if len(body) == 0 {
		return nil
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return openai.InvalidRequest("", "The body must be a JSON object: %v", err)
	}
	for k := range keys {
		if !slices.Contains(known, k) {
			return openai.InvalidRequest(k, "Unknown key %q.", k)
		}
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return openai.InvalidRequest(te.Field, "Invalid type for %q: %v.", te.Field, err)
		}
		return openai.InvalidRequest("", "Invalid body: %v", err)
	}
	return nil
}

// Serve runs call against this node's admin routes and records the
// answer: what a peer's forwarded call runs here (the peer has
// authenticated it; the cluster's gRPC authenticates the peer).
func (h *Handler) Serve(ctx context.Context, call Call) (Reply, error) {
	target := call.Path
	if call.Query != "" {
		target += "?" + call.Query
	}
	req, err := http.NewRequestWithContext(ctx, call.Method, target, bytes.NewReader(call.Body))
	if err != nil {
		return Reply{}, fmt.Errorf("admin: forwarded call: %w", err)
	}
	rec := &recorder{header: http.Header{}}
	h.mux.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return Reply{Status: rec.status, Body: rec.body.Bytes()}, nil
}

// recorder is the http.ResponseWriter of a forwarded call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (h *Handler) logWarn(msg string, args ...any) {
	if h.cfg.Logger != nil {
		h.cfg.Logger.Warn(msg, args...)
	}
}
