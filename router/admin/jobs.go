package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/hub"
	"fusion/jobs"
	"fusion/router/openai"
)

// Jobs is what the jobs routes need: the records every node sees (in a
// cluster, the replicated ones) and this node's running jobs.
type Jobs interface {
	List() []jobs.Job
	Get(id string) (jobs.Job, bool)
	// Cancel stops a job running on this node and returns its last
	// record (jobs.ErrElsewhere for another node's job).
	Cancel(ctx context.Context, id string) (jobs.Job, error)
	// Delete removes a finished job's record.
	Delete(ctx context.Context, id string) error
	// Submit starts a job of kind on this node.
	Submit(ctx context.Context, kind string, params any, fn jobs.Func) (jobs.Job, error)
}

// Hub is what the Hugging Face (and ModelScope) routes need.
type Hub interface {
	// Search lists models of source (hub.SourceHF or
	// hub.SourceModelScope).
	Search(ctx context.Context, source string, o hub.SearchOptions) ([]hub.Model, error)
	// Download starts a download job on this node.
	Download(ctx context.Context, req DownloadRequest) (jobs.Job, error)
	// Plan says what a download of req would fetch, fetching nothing.
	Plan(ctx context.Context, req DownloadRequest) (hub.Selection, error)
}

// DownloadRequest is the body of POST /admin/api/hf/download.
type DownloadRequest struct {
	// Source is where from: "hf" (default) or "modelscope".
	Source   string   `json:"source,omitempty"`
	Repo     string   `json:"repo"`
	Revision string   `json:"revision,omitempty"`
	Allow    []string `json:"allow_patterns,omitempty"`
	// Name is the model's name in the models directory (default the
	// repo's name).
	Name string `json:"name,omitempty"`
	// Node runs the download (default the node asked).
	Node string `json:"node,omitempty"`
	// Force downloads even when the node's HF cache already holds the
	// revision complete (otherwise the job ends at once, its result
	// from_cache with the snapshot's path).
	Force bool `json:"force,omitempty"`
	// Placement downloads to every node a placement of the model takes
	// (in a cluster), as one job on the node asked that starts a
	// download on each and, once all are done, stores the placement.
	Placement *DownloadPlacement `json:"placement,omitempty"`
	// Resumes is the job this one continues, started again by the node
	// after a stop or restart interrupted it, the ResumeCount-th time in
	// a row (set by the node, not accepted in a request).
	Resumes     string `json:"resumes,omitempty"`
	ResumeCount int    `json:"resume_count,omitempty"`
}

// Limits of the download route.
const (
	maxDownloadBody  = 64 << 10
	maxAllowPatterns = 64
	maxPatternLen    = 256
	maxRevisionLen   = 256
)

// startWait bounds how long a download request waits for the node's
// jobs to be ready (503 after).
const startWait = 15 * time.Second

// JobStreamPoll is how often a job's event stream looks at its record
// (records change at most every second or so); jobHeartbeat keeps an
// idle stream open through proxies.
const (
	JobStreamPoll = 200 * time.Millisecond
	jobHeartbeat  = 15 * time.Second
)

// JobList is the answer of GET /admin/api/jobs.
type JobList struct {
	Object string     `json:"object"`
	Data   []jobs.Job `json:"data"`
}

func (h *Handler) mountJobs(r chi.Router) {
	if h.cfg.Jobs != nil {
		r.Get("/admin/api/jobs", h.jobList)
		r.Get("/admin/api/jobs/{id}", h.jobGet)
		r.Delete("/admin/api/jobs/{id}", h.jobDelete)
	}
	if h.cfg.Hub != nil && h.cfg.Jobs != nil {
		r.Get("/admin/api/hf/models", h.hfSearch)
		r.Post("/admin/api/hf/download", h.hfDownload)
	}
	if h.cfg.Quantizer != nil && h.cfg.Jobs != nil {
		r.Post("/admin/api/oq/start", h.oqStart)
	}
}

func (h *Handler) jobList(w http.ResponseWriter, r *http.Request) {
	list := h.cfg.Jobs.List()
	q := r.URL.Query()
	list = slices.DeleteFunc(list, func(j jobs.Job) bool {
		return (q.Get("kind") != "" && j.Kind != q.Get("kind")) || (q.Get("state") != "" && j.State != q.Get("state"))
	})
	if list == nil {
		list = []jobs.Job{}
	}
	openai.WriteJSON(w, http.StatusOK, JobList{Object: "list", Data: list})
}

func jobNotFound(id string) *openai.Error {
	return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "id", Code: "job_not_found",
		Message: fmt.Sprintf("No job %q.", id)}
}

func (h *Handler) jobGet(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	j, ok := h.cfg.Jobs.Get(id)
	if !ok {
		openai.WriteError(w, jobNotFound(id))
		return
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		openai.WriteJSON(w, http.StatusOK, j)
		return
	}
	// The record as it changes, until it is final: any node can serve
	// it, since the records are replicated.
	rc := http.NewResponseController(w)
	fl := flusher{rc}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(j jobs.Job) {
		b, _ := json.Marshal(j)
		fmt.Fprintf(w, "event: job\ndata: %s\n\n", b)
		fl.Flush()
	}
	send(j)
	poll := time.NewTicker(JobStreamPoll)
	defer poll.Stop()
	beat := time.NewTicker(jobHeartbeat)
	defer beat.Stop()
	last := j
	for !jobs.Final(last.State) {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			fmt.Fprint(w, ": heartbeat\n\n")
			fl.Flush()
		case <-poll.C:
			j, ok := h.cfg.Jobs.Get(id)
			if !ok { // deleted or evicted
				fmt.Fprintf(w, "event: error\ndata: {\"message\":%q}\n\n", "the job's record is gone")
				fl.Flush()
				return
			}
			if !j.Updated.Equal(last.Updated) || j.State != last.State {
				send(j)
				last = j
			}
		}
	}
	fmt.Fprint(w, "event: done\ndata: {}\n\n")
	fl.Flush()
}

// jobDelete cancels a live job (on its node, wherever it was asked) or
// removes a finished job's record.
func (h *Handler) jobDelete(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	j, ok := h.cfg.Jobs.Get(id)
	if !ok {
		openai.WriteError(w, jobNotFound(id))
		return
	}
	if jobs.Final(j.State) {
		if err := h.cfg.Jobs.Delete(r.Context(), id); err != nil && !errors.Is(err, jobs.ErrNotFound) {
			openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "job_not_deleted",
				Message: "The job's record was not deleted: " + err.Error(), RetryAfter: 1})
			return
		}
		openai.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "job", "deleted": true})
		return
	}
	if j.Node != h.cfg.Self && h.cfg.Peers != nil {
		if !slices.Contains(h.cfg.Peers.Nodes(), j.Node) {
			openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Code: "node_unreachable",
				Message: fmt.Sprintf("Job %s runs on node %q, which is not live: it is marked interrupted when that node starts again.", id, j.Node)})
			return
		}
		q := r.URL.Query()
		q.Set("node", j.Node)
		rep, err := h.cfg.Peers.Forward(r.Context(), j.Node, Call{Method: http.MethodDelete, Path: r.URL.Path, Query: q.Encode()})
		if err != nil {
			openai.WriteError(w, &openai.Error{Status: http.StatusBadGateway, Type: "server_error", Code: "node_unreachable",
				Message: fmt.Sprintf("Node %q did not answer: %v", j.Node, err)})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		_, _ = w.Write(rep.Body)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	last, err := h.cfg.Jobs.Cancel(ctx, id)
	if err != nil && !errors.Is(err, jobs.ErrFinished) {
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Code: "job_not_cancelled",
			Message: fmt.Sprintf("Job %s was not cancelled: %v", id, err)})
		return
	}
	openai.WriteJSON(w, http.StatusOK, last)
}

// ModelSearch is the answer of GET /admin/api/hf/models.
type ModelSearch struct {
	Object string      `json:"object"`
	Data   []hub.Model `json:"data"`
}

func (h *Handler) hfSearch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	source, ok := hubSource(q.Get("source"))
	if !ok {
		openai.WriteError(w, openai.InvalidRequest("source", "source must be hf or modelscope."))
		return
	}
	o := hub.SearchOptions{Search: q.Get("search"), Author: q.Get("author"), Library: q.Get("library"), Sort: q.Get("sort")}
	if o.Search == "" {
		o.Search = q.Get("q")
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > hub.MaxSearchLimit {
			openai.WriteError(w, openai.InvalidRequest("limit", "limit must be an integer from 1 to %d.", hub.MaxSearchLimit))
			return
		}
		o.Limit = n
	}
	switch o.Sort {
	case "", "downloads", "likes", "lastModified", "trendingScore", "createdAt":
	default:
		openai.WriteError(w, openai.InvalidRequest("sort", "sort must be downloads, likes, lastModified, trendingScore or createdAt."))
		return
	}
	models, err := h.cfg.Hub.Search(r.Context(), source, o)
	if err != nil {
		openai.WriteError(w, hubError(source, err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, ModelSearch{Object: "list", Data: models})
}

// hubSource is the source a request names ("" is Hugging Face).
func hubSource(s string) (string, bool) {
	switch s {
	case "", "hf", "huggingface":
		return hub.SourceHF, true
	case "modelscope":
		return hub.SourceModelScope, true
	}
	return "", false
}

// hubError is the answer for a failed call to the Hub or ModelScope: a
// 502 saying what it answered (its 401 is not this server's).
func hubError(source string, err error) *openai.Error {
	name := "Hugging Face: "
	if source == hub.SourceModelScope {
		name = "ModelScope: "
	}
	return &openai.Error{Status: http.StatusBadGateway, Type: "server_error", Code: "hub_error", Message: name + err.Error()}
}

func (h *Handler) hfDownload(w http.ResponseWriter, r *http.Request) {
	req, ok := jobRequest(h, w, r, maxDownloadBody, checkDownload, "source", "repo", "revision", "allow_patterns", "name", "node", "force", "placement")
	if !ok {
		return
	}
	if req.Placement != nil {
		h.placeDownload(w, r, req)
		return
	}
	// A node just started may still be marking its last run's jobs.
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	j, err := h.cfg.Hub.Download(ctx, req)
	writeJobStarted(w, "download", j, err)
}

// jobRequester is the body of a request that starts a job on a node.
type jobRequester interface {
	jobNode() string // the node asked to run the job ("": this one)
}

func (q DownloadRequest) jobNode() string { return q.Node }
func (q BenchRunRequest) jobNode() string { return q.Node }
func (q AccuracyRequest) jobNode() string { return q.Node }
func (q OQRequest) jobNode() string       { return q.Node }

// jobRequest reads the body of a request that starts a job (at most
// limit bytes), decodes it strictly (known: its fields), checks it and,
// when another node is to run the job, forwards it there. ok is false
// when the answer has been written (an error, or the other node's).
func jobRequest[T jobRequester](h *Handler, w http.ResponseWriter, r *http.Request, limit int64, check func(T) *openai.Error, known ...string) (req T, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	body, e := readBody(r)
	if e == nil {
		e = decodeStrict(body, &req, known...)
	}
	if e == nil {
		e = check(req)
	}
	if e != nil {
		openai.WriteError(w, e)
		return req, false
	}
	nodeFromBody(r, req.jobNode())
	return req, !h.forwarded(w, r, body)
}

// writeJobStarted answers a request that submitted a job: 202 and its
// record, or why it did not start.
func writeJobStarted(w http.ResponseWriter, what string, j jobs.Job, err error) {
	switch {
	case errors.Is(err, jobs.ErrTooMany):
		openai.WriteError(w, &openai.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "too_many_jobs", Message: err.Error(), RetryAfter: 10})
		return
	case errors.Is(err, jobs.ErrClosed):
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "stopping", Message: err.Error(), RetryAfter: 1})
		return
	case err != nil:
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "job_not_started", Message: "The " + what + " did not start: " + err.Error(), RetryAfter: 1})
		return
	}
	openai.WriteJSON(w, http.StatusAccepted, j)
}

func checkDownload(req DownloadRequest) *openai.Error {
	if _, ok := hubSource(req.Source); !ok {
		return openai.InvalidRequest("source", "source must be hf or modelscope.")
	}
	if req.Repo == "" {
		return openai.MissingParam("repo")
	}
	if err := hub.CheckRepo(req.Repo); err != nil {
		return openai.InvalidRequest("repo", "Invalid repo %q: want owner/name of a Hugging Face or ModelScope model repository.", req.Repo)
	}
	if len(req.Revision) > maxRevisionLen || strings.ContainsAny(req.Revision, "\x00\n") || strings.Contains(req.Revision, "..") {
		return openai.InvalidRequest("revision", "Invalid revision.")
	}
	if len(req.Allow) > maxAllowPatterns {
		return openai.InvalidRequest("allow_patterns", "At most %d allow_patterns.", maxAllowPatterns)
	}
	for i, p := range req.Allow {
		if p == "" || len(p) > maxPatternLen {
			return openai.InvalidRequest(fmt.Sprintf("allow_patterns[%d]", i), "A pattern is 1 to %d characters.", maxPatternLen)
		}
	}
	if req.Name != "" && (strings.ContainsAny(req.Name, `/\`) || strings.HasPrefix(req.Name, ".") || len(req.Name) > 200) {
		return openai.InvalidRequest("name", "name must be a plain file name, not hidden.")
	}
	return checkPlacement(req.Placement)
}
