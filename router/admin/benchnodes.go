package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"fusion/jobs"
	"fusion/router/openai"
)

// BenchNodesResult is the result of a benchmark asked of several nodes:
// the job each ran, and how it ended, by node. Each of those jobs holds
// its node's figures and recorded its node's profile.
type BenchNodesResult struct {
	Model  string            `json:"model"`
	Jobs   map[string]string `json:"jobs"`
	States map[string]string `json:"states"`
}

// benchTargets are the nodes a request's "nodes" names, each live: for
// "each", the live nodes holding model, not draining (this one alone
// when not in a cluster).
func (h *Handler) benchTargets(model string, set *BenchNodes) ([]string, *openai.Error) {
	live := func(id string) bool {
		return id == h.cfg.Self || (h.cfg.Peers != nil && slices.Contains(h.cfg.Peers.Nodes(), id))
	}
	if set.Each {
		ids := []string{h.cfg.Self}
		if h.cfg.Placer != nil {
			ids = slices.DeleteFunc(h.cfg.Placer.HoldingNodes(model), func(id string) bool { return !live(id) })
		}
		if len(ids) == 0 {
			return nil, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "model", Code: "model_not_found",
				Message: fmt.Sprintf("No live node holds %q.", model)}
		}
		return ids, nil
	}
	for i, id := range set.IDs {
		if !live(id) {
			return nil, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: fmt.Sprintf("nodes[%d]", i), Code: "node_not_found",
				Message: fmt.Sprintf("No live node %q in this cluster.", id)}
		}
	}
	return set.IDs, nil
}

// benchEach answers a benchmark request asked of several nodes: it starts
// the benchmark's job on each (body is the request for a node, local
// starts it on this one) before answering, so a node's refusal (a
// prompt beyond the model's context, say) is the answer and no job runs;
// then one job of kind on this node follows them, its progress their
// steps summed.
func (h *Handler) benchEach(ctx context.Context, w http.ResponseWriter, what, kind, path, model string, set *BenchNodes, params any,
	body func(node string) any, local func(context.Context) (jobs.Job, error)) {
	nodes, e := h.benchTargets(model, set)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	started := map[string]string{}
	for _, node := range nodes {
		j, err := h.startJobOn(ctx, node, path, body(node), local)
		if err != nil {
			h.cancelChildren(ctx, started, nil, "the others did not all start")
			if !writeBenchRefusal(w, err) {
				writeJobStarted(w, what+" on "+node, j, err)
			}
			return
		}
		started[j.Node] = j.ID
	}
	j, err := h.cfg.Jobs.Submit(ctx, kind, params, func(ctx context.Context, rep *jobs.Reporter) (any, error) {
		return h.followChildren(ctx, rep, model, started)
	})
	if err != nil {
		h.cancelChildren(ctx, started, nil, "their job did not start")
	}
	writeJobStarted(w, what, j, err)
}

// cancelChildren cancels the child jobs (by node) that are not over, on
// a clock of their own (they outlive the context that started them).
func (h *Handler) cancelChildren(ctx context.Context, children map[string]string, rep *jobs.Reporter, why string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for node, id := range children {
		if j, ok := h.cfg.Jobs.Get(id); ok && jobs.Final(j.State) {
			continue
		}
		err := h.cancelJob(cctx, node, id)
		if rep == nil {
			continue
		}
		if err != nil {
			rep.Logf("%s: cancelling %s: %v", node, id, err)
			continue
		}
		rep.Logf("%s: %s cancelled (%s)", node, id, why)
	}
}

// followChildren is the job of a benchmark asked of several nodes: it
// follows the child jobs' replicated records until every one is over;
// it fails when one did not end done, and cancels them when cancelled.
func (h *Handler) followChildren(ctx context.Context, rep *jobs.Reporter, model string, children map[string]string) (any, error) {
	res := BenchNodesResult{Model: model, Jobs: children, States: map[string]string{}}
	nodes := make([]string, 0, len(children))
	for node := range children {
		nodes = append(nodes, node)
	}
	slices.Sort(nodes)
	for _, node := range nodes {
		rep.Logf("%s: %s", node, children[node])
	}
	tick := time.NewTicker(placementPoll)
	defer tick.Stop()
	began, seen, errs := time.Now(), map[string]bool{}, map[string]string{}
	for {
		var done, total int64
		left := 0
		for _, node := range nodes {
			id := children[node]
			j, ok := h.cfg.Jobs.Get(id)
			switch {
			case !ok && (seen[id] || time.Since(began) > placementSeen):
				h.cancelChildren(ctx, children, rep, "another's record is gone")
				return nil, fmt.Errorf("the record of %s's job %s is gone", node, id)
			case !ok: // not replicated here yet
				left++
				continue
			case jobs.Final(j.State):
				res.States[node] = j.State
				errs[node] = j.Error
			default:
				left++
			}
			seen[id] = true
			done += j.Progress.Done
			total += j.Progress.Total
		}
		rep.SetTotal("steps", total)
		rep.SetDone(done)
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			h.cancelChildren(ctx, children, rep, "their job was stopped")
			return nil, context.Cause(ctx)
		case <-tick.C:
		}
	}
	var failed []string
	for _, node := range nodes {
		if res.States[node] != jobs.Done {
			failed = append(failed, fmt.Sprintf("%s's %s ended %s: %s", node, children[node], res.States[node], errs[node]))
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	rep.Logf("done on %s", strings.Join(nodes, ", "))
	return res, nil
}
