package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"fusion/cluster"
	"fusion/hub"
	"fusion/jobs"
	"fusion/router/openai"
)

// Placer chooses the nodes a placement takes before the model is on
// them, and stores placements (the cluster member; nil on a lone node).
type Placer interface {
	DownloadNodes(model string, spec cluster.PlacementSpec, need int64) (cluster.DownloadPlan, error)
	SetPlacementSpec(ctx context.Context, model string, spec cluster.PlacementSpec) error
	// HoldingNodes are the live nodes that have model on disk or loaded.
	HoldingNodes(model string) []string
}

// DownloadPlacement is a download request's placement: the model goes to
// every node a placement of Replicas groups of Stages nodes takes (0
// stages: as few as the weights need), pinned nodes first.
type DownloadPlacement struct {
	Replicas int      `json:"replicas,omitempty"`
	Stages   int      `json:"stages,omitempty"`
	Pin      []string `json:"pin,omitempty"`
}

// UnmarshalJSON refuses unknown keys, as the rest of the body does.
func (p *DownloadPlacement) UnmarshalJSON(b []byte) error {
	type plain DownloadPlacement
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var v plain
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("placement: %w", err)
	}
	*p = DownloadPlacement(v)
	return nil
}

// Limits of a download's placement.
const (
	maxPlacementReplicas = 64
	maxPlacementPins     = 64
)

// placementPoll is how often a placement's download job reads the
// records of the downloads it waits for; placementSeen bounds how long a
// record may take to reach this node's replica of the records.
const (
	placementPoll = 250 * time.Millisecond
	placementSeen = 30 * time.Second
)

// PlacementResult is the result of a placement's download job.
type PlacementResult struct {
	Model     string                `json:"model"`
	Placement cluster.PlacementSpec `json:"placement"`
	cluster.DownloadPlan
	// Downloads are the download jobs, by node (none on the nodes that
	// had the model).
	Downloads map[string]string `json:"downloads"`
	Bytes     int64             `json:"bytes"` // of the model, each node
}

func checkPlacement(p *DownloadPlacement) *openai.Error {
	if p == nil {
		return nil
	}
	if p.Replicas < 0 || p.Replicas > maxPlacementReplicas {
		return openai.InvalidRequest("placement.replicas", "replicas is 1 to %d.", maxPlacementReplicas)
	}
	if p.Stages < 0 || p.Stages > cluster.MaxStages {
		return openai.InvalidRequest("placement.stages", "stages is 0 (as few as the model needs) to %d.", cluster.MaxStages)
	}
	if len(p.Pin) > maxPlacementPins {
		return openai.InvalidRequest("placement.pin", "At most %d pinned nodes.", maxPlacementPins)
	}
	for i, id := range p.Pin {
		if id == "" || len(id) > 256 || slices.Index(p.Pin, id) != i {
			return openai.InvalidRequest(fmt.Sprintf("placement.pin[%d]", i), "A pinned node is a node id, named once.")
		}
	}
	return nil
}

// placeDownload starts the job that downloads req's model to every node
// of its placement and then stores the placement, so the planner places
// the model there once every node has it.
func (h *Handler) placeDownload(w http.ResponseWriter, r *http.Request, req DownloadRequest) {
	if h.cfg.Placer == nil || h.cfg.Peers == nil {
		openai.WriteError(w, openai.InvalidRequest("placement", "This node is not in a cluster: download without a placement."))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), startWait)
	defer cancel()
	sel, err := h.cfg.Hub.Plan(ctx, req)
	if err != nil {
		if errors.Is(err, hub.ErrNoFiles) {
			openai.WriteError(w, openai.InvalidRequest("allow_patterns", "%v", err))
			return
		}
		openai.WriteError(w, hubError(req.Source, err))
		return
	}
	if sel.Models != 1 {
		openai.WriteError(w, openai.InvalidRequest("allow_patterns", "The files selected make %d models (one per GGUF file); a placement is of one: select one GGUF file.", sel.Models))
		return
	}
	spec := cluster.PlacementSpec{Replicas: max(req.Placement.Replicas, 1), Stages: req.Placement.Stages, Pin: req.Placement.Pin}
	plan, err := h.cfg.Placer.DownloadNodes(sel.Model, spec, sel.WeightBytes)
	if err != nil {
		code := "placement_unfit"
		if errors.Is(err, cluster.ErrInsufficientMemory) {
			code = "insufficient_memory"
		}
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Param: "placement", Code: code,
			Message: fmt.Sprintf("No placement for %s: %v", sel.Model, err)})
		return
	}
	// The placement the planner gets: on the nodes fetched to, in their
	// order, with the stages chosen.
	spec.Pin = plan.Nodes
	if plan.Stages >= 2 {
		spec.Stages = plan.Stages
	}
	child := req
	child.Placement, child.Name = nil, sel.Model
	// The HF cache names its models ORG/NAME and the models directory
	// NAME: every node fetches, so the model has one name everywhere.
	child.Force = true
	j, err := h.cfg.Jobs.Submit(ctx, "download", req, func(ctx context.Context, rep *jobs.Reporter) (any, error) {
		return h.runPlacement(ctx, rep, child, sel, plan, spec)
	})
	writeJobStarted(w, "download", j, err)
}

// runPlacement is a placement's download job: a download job on each node
// that lacks the model, their bytes as its progress; when every one is
// done, the placement is stored. When one fails or this job is
// cancelled, the others are cancelled (their bytes stay staged: asked
// again, they resume).
func (h *Handler) runPlacement(ctx context.Context, rep *jobs.Reporter, req DownloadRequest, sel hub.Selection, plan cluster.DownloadPlan, spec cluster.PlacementSpec) (any, error) {
	res := PlacementResult{Model: sel.Model, Placement: spec, DownloadPlan: plan, Downloads: map[string]string{}, Bytes: sel.Bytes}
	var fetch []string
	for _, id := range plan.Nodes {
		if !slices.Contains(plan.Have, id) {
			fetch = append(fetch, id)
		}
	}
	rep.SetTotal("bytes", sel.Bytes*int64(len(fetch)))
	rep.Logf("%s (%d bytes of weights) on %s: %d replica(s) of %d stage(s)", sel.Model, sel.WeightBytes, strings.Join(plan.Nodes, ", "), spec.Replicas, plan.Stages)
	if len(plan.Have) > 0 {
		rep.Logf("already there: %s", strings.Join(plan.Have, ", "))
	}
	stop := func(why string) {
		// The downloads outlive this job's context: cancel them on
		// their own clock.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for node, id := range res.Downloads {
			if j, ok := h.cfg.Jobs.Get(id); ok && jobs.Final(j.State) {
				continue
			}
			if err := h.cancelJob(cctx, node, id); err != nil {
				rep.Logf("%s: cancelling %s: %v", node, id, err)
				continue
			}
			rep.Logf("%s: %s cancelled (%s)", node, id, why)
		}
	}
	for _, node := range fetch {
		req.Node = node
		j, err := h.startDownload(ctx, node, req)
		if err != nil {
			stop("the placement's downloads did not all start")
			return nil, fmt.Errorf("the download on %s did not start: %w", node, err)
		}
		res.Downloads[node] = j.ID
		rep.Logf("%s: download %s", node, j.ID)
	}
	// resumed is the download job that continues id, if any.
	resumed := func(id string) string {
		for _, j := range h.cfg.Jobs.List() {
			var p DownloadRequest
			if j.Kind == "download" && json.Unmarshal(j.Params, &p) == nil && p.Resumes == id {
				return j.ID
			}
		}
		return ""
	}
	tick := time.NewTicker(placementPoll)
	defer tick.Stop()
	started, seen, back := time.Now(), map[string]bool{}, map[string]time.Time{}
	for {
		var done int64
		left := 0
		for _, node := range fetch {
			id := res.Downloads[node]
			j, ok := h.cfg.Jobs.Get(id)
			switch {
			case !ok && (seen[id] || time.Since(started) > placementSeen):
				stop("another download's record is gone")
				return nil, fmt.Errorf("the record of %s's download %s is gone", node, id)
			case !ok: // not replicated here yet
				left++
			case j.State == jobs.Done:
				seen[id] = true
				done += sel.Bytes
			case j.State == jobs.Interrupted && resumed(id) != "":
				// The node stopped or restarted and started the download
				// again: follow that job.
				res.Downloads[node] = resumed(id)
				rep.Logf("%s: download %s (resuming %s)", node, res.Downloads[node], id)
				left++
			case j.State == jobs.Interrupted && h.waitResume(node, id, back):
				left++ // its node may resume it when it is back
			case jobs.Final(j.State):
				stop(fmt.Sprintf("%s's download ended %s", node, j.State))
				return nil, fmt.Errorf("the download on %s (%s) ended %s: %s", node, id, j.State, j.Error)
			default:
				seen[id] = true
				done += min(j.Progress.Done, sel.Bytes)
				left++
			}
		}
		rep.SetDone(done)
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			stop("the placement's download was stopped")
			return nil, context.Cause(ctx)
		case <-tick.C:
		}
	}
	if err := h.cfg.Placer.SetPlacementSpec(ctx, sel.Model, spec); err != nil {
		return nil, fmt.Errorf("every node has %s, but storing its placement failed: %w", sel.Model, err)
	}
	rep.Logf("every node has %s: placement stored (%d replica(s), pinned %s)", sel.Model, spec.Replicas, strings.Join(spec.Pin, ", "))
	return res, nil
}

// waitResume says whether a placement's download id, interrupted by a
// stop or restart of node, may still be resumed by it: while node is not
// live, and for placementSeen after it is live again (back records when
// it was first seen back).
func (h *Handler) waitResume(node, id string, back map[string]time.Time) bool {
	if node != h.cfg.Self && !slices.Contains(h.cfg.Peers.Nodes(), node) {
		delete(back, id)
		return true
	}
	if _, ok := back[id]; !ok {
		back[id] = time.Now()
	}
	return time.Since(back[id]) < placementSeen
}

// startDownload starts req's download on node (this one, or another
// through the cluster's admin service) and returns its job.
func (h *Handler) startDownload(ctx context.Context, node string, req DownloadRequest) (jobs.Job, error) {
	return h.startJobOn(ctx, node, "/admin/api/hf/download", req, func(ctx context.Context) (jobs.Job, error) {
		req.Node = ""
		return h.cfg.Hub.Download(ctx, req)
	})
}
