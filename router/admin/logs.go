package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/router/openai"
)

// Logs reads a node's log file (internal/logfile implements it).
type Logs interface {
	// Tail returns up to n of the last lines at level or above (all
	// levels when level is ""), oldest first, from the current file and
	// the rotated ones.
	Tail(n int, level string) ([]string, error)
	// Follow calls fn with every line written from now on at level or
	// above, until ctx ends.
	Follow(ctx context.Context, level string, fn func(line string)) error
	// CheckLevel says whether level is a level name Tail and Follow take.
	CheckLevel(level string) error
}

// LogFollower streams another node's log lines (the cluster's admin
// service implements it next to Peers).
type LogFollower interface {
	FollowLogs(ctx context.Context, node, level string, fn func(line string)) error
}

// Limits of the log routes.
const (
	DefaultLogLines = 200
	MaxLogLines     = 10_000
	logHeartbeat    = 15 * time.Second
)

// LogsAnswer is the answer of GET /admin/api/logs.
type LogsAnswer struct {
	Node  string   `json:"node"`
	Lines []string `json:"lines"`
}

func (h *Handler) mountLogs(r chi.Router) {
	if h.cfg.Logs == nil {
		return
	}
	r.Get("/admin/api/logs", h.getLogs)
	r.Get("/admin/api/logs/stream", h.streamLogs)
}

// logQuery reads ?lines and ?level.
func (h *Handler) logQuery(r *http.Request) (int, string, *openai.Error) {
	q := r.URL.Query()
	n := DefaultLogLines
	if s := q.Get("lines"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxLogLines {
			return 0, "", openai.InvalidRequest("lines", "Invalid 'lines': %q must be an integer between 1 and %d.", s, MaxLogLines)
		}
		n = v
	}
	level := q.Get("level")
	if err := h.cfg.Logs.CheckLevel(level); err != nil {
		return 0, "", openai.InvalidRequest("level", "Invalid 'level': %v.", err)
	}
	return n, level, nil
}

func (h *Handler) getLogs(w http.ResponseWriter, r *http.Request) {
	n, level, e := h.logQuery(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if h.forwarded(w, r, nil) {
		return
	}
	lines, err := h.cfg.Logs.Tail(n, level)
	if err != nil {
		openai.WriteError(w, fmt.Errorf("reading the log: %w", err))
		return
	}
	if lines == nil {
		lines = []string{}
	}
	openai.WriteJSON(w, http.StatusOK, LogsAnswer{Node: h.cfg.Self, Lines: lines})
}

// streamLogs sends new log lines as SSE "log" events (data: the line), a
// comment every logHeartbeat, until the client goes away. ?node streams
// another node's lines over the cluster.
func (h *Handler) streamLogs(w http.ResponseWriter, r *http.Request) {
	_, level, e := h.logQuery(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	follow := h.cfg.Logs.Follow
	if node := h.target(r); node != "" {
		lf, ok := h.cfg.Peers.(LogFollower)
		if !ok || !hasNode(h.cfg.Peers, node) {
			openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "node", Code: "node_not_found",
				Message: fmt.Sprintf("No live node %q in this cluster.", node)})
			return
		}
		follow = func(ctx context.Context, level string, fn func(string)) error {
			return lf.FollowLogs(ctx, node, level, fn)
		}
	}
	rc := http.NewResponseController(w)
	fl := flusher{rc}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	lines := make(chan string, 256)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- follow(ctx, level, func(l string) {
			select {
			case lines <- l:
			default: // a slow client loses lines rather than holding the logger
			}
		})
	}()
	tick := time.NewTicker(logHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				b, _ := json.Marshal(map[string]string{"message": err.Error()})
				fmt.Fprintf(w, "event: error\ndata: %s\n\n", b)
				fl.Flush()
			}
			return
		case l := <-lines:
			fmt.Fprintf(w, "event: log\ndata: %s\n\n", l)
			fl.Flush()
		case <-tick.C:
			fmt.Fprint(w, ": heartbeat\n\n")
			fl.Flush()
		}
	}
}

// flusher flushes through the middleware's writers.
type flusher struct{ rc *http.ResponseController }

func (f flusher) Flush() { _ = f.rc.Flush() }

func hasNode(p Peers, node string) bool {
	if p == nil {
		return false
	}
	for _, n := range p.Nodes() {
		if n == node {
			return true
		}
	}
	return false
}
