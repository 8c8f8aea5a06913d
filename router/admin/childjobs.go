package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"fusion/jobs"
)

// Child jobs: a job on the node asked that starts jobs on other nodes
// (a placement's downloads, a benchmark on each node holding a model)
// starts each through the cluster's admin service, as a client would,
// and follows its replicated record.

// RefusedError is a node's answer refusing to start a child job: its
// status and body, in the route's error shape.
type RefusedError struct {
	Node   string
	Status int
	Body   []byte
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%d: %s", e.Status, bytes.TrimSpace(e.Body))
}

// startJobOn starts a job on node: on this one with local, on another by
// posting body (its "node" field naming node) to path there. A refusal
// is a *RefusedError.
func (h *Handler) startJobOn(ctx context.Context, node, path string, body any, local func(context.Context) (jobs.Job, error)) (jobs.Job, error) {
	if node == h.cfg.Self {
		return local(ctx)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return jobs.Job{}, err
	}
	rep, err := h.cfg.Peers.Forward(ctx, node, Call{Method: http.MethodPost, Path: path,
		Query: url.Values{"node": {node}}.Encode(), Body: raw})
	if err != nil {
		return jobs.Job{}, err
	}
	if rep.Status != http.StatusAccepted {
		return jobs.Job{}, &RefusedError{Node: node, Status: rep.Status, Body: rep.Body}
	}
	var j jobs.Job
	if err := json.Unmarshal(rep.Body, &j); err != nil {
		return jobs.Job{}, fmt.Errorf("its answer: %w", err)
	}
	return j, nil
}

// cancelJob cancels job id running on node (this one, or alone, any
// name of it).
func (h *Handler) cancelJob(ctx context.Context, node, id string) error {
	if node == h.cfg.Self || h.cfg.Peers == nil {
		_, err := h.cfg.Jobs.Cancel(ctx, id)
		if errors.Is(err, jobs.ErrFinished) {
			return nil
		}
		return err
	}
	rep, err := h.cfg.Peers.Forward(ctx, node, Call{Method: http.MethodDelete, Path: "/admin/api/jobs/" + url.PathEscape(id),
		Query: url.Values{"node": {node}}.Encode()})
	if err != nil {
		return err
	}
	if rep.Status != http.StatusOK {
		return fmt.Errorf("%d: %s", rep.Status, bytes.TrimSpace(rep.Body))
	}
	return nil
}
