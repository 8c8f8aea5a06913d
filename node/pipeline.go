package node

import (
	"context"
	"errors"
	"sort"
	"sync"

	"google.golang.org/grpc"

	"fusion/cluster"
	"fusion/cluster/clusterpb"
	"fusion/cluster/pipeline"
	"fusion/engine/model"
	"fusion/engine/runner"
)

// stageSet holds the later pipeline stages of sharded models on this node
// (a first stage is a model of the runner's pool, see runner.SetPipeline).
type stageSet struct {
	mu   sync.Mutex
	held map[string]*heldStage // by model
	srv  *pipeline.Server      // the Pipeline service (set before the member starts)
}

// PipelineSequences is the number of sequences whose KV the later
// pipeline stages on this node hold (0 when it is not a cluster member).
func (n *Node) PipelineSequences() int64 {
	if n.stages.srv == nil {
		return 0
	}
	return n.stages.srv.Sequences()
}

type heldStage struct {
	generation uint64
	layers     model.Range
	next       string // the next stage's node id ("" on the last)
	sm         *runner.StageModel
	reported   bool // Ready recorded in the placement (sync loop only)
	// Under stageSet.mu: streams holding the stage, and whether it was
	// dropped (closed once the last stream lets go).
	refs    int
	dropped bool
}

// drop takes h out of service: it closes now if no stream holds it, else
// when the last one releases it. Called with stageSet.mu held; returns
// whether the caller must close it.
func (h *heldStage) drop() bool {
	h.dropped = true
	return h.refs == 0
}

// StageStatus is a later pipeline stage this node holds.
type StageStatus struct {
	Model       string
	Generation  uint64
	Layers      model.Range
	WeightBytes int64 // what the stage's weights hold on the backend
}

// Stages lists the later pipeline stages this node holds, by model.
func (n *Node) Stages() []StageStatus {
	n.stages.mu.Lock()
	defer n.stages.mu.Unlock()
	var out []StageStatus
	for name, h := range n.stages.held {
		out = append(out, StageStatus{Model: name, Generation: h.generation, Layers: h.layers, WeightBytes: h.sm.WeightBytes()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// peerConn is the pooled gRPC connection to a peer's address.
func (n *Node) peerConn(addr string) (grpc.ClientConnInterface, error) {
	cl, err := n.pool.Client(addr)
	if err != nil {
		return nil, err
	}
	return cl.Conn(), nil
}

// grpcOf is the gRPC address the member knows for a node id.
func grpcOf(m *cluster.Member, id string) string {
	for _, p := range m.Members() {
		if p.ID == id {
			return p.GRPC
		}
	}
	return ""
}

// registerPipeline serves this node's later stages to the stage before.
func (n *Node) registerPipeline() {
	n.stages.srv = pipeline.Register(n.member.GRPCServer(), func(name string) (pipeline.Stage, bool) {
		n.stages.mu.Lock()
		h, ok := n.stages.held[name]
		n.stages.mu.Unlock()
		if !ok {
			return pipeline.Stage{}, false
		}
		st := pipeline.Stage{Generation: h.generation, Model: h.sm.Model}
		// The stage's blocks of prompts go into this node's prefix cache.
		if key, err := n.runner.StageCacheKey(name, h.layers); err == nil {
			st.Cache, st.CacheKey = n.runner.PrefixCache(), key
		}
		if h.next != "" {
			if st.Next = grpcOf(n.member, h.next); st.Next == "" {
				return pipeline.Stage{}, false
			}
		}
		n.stages.mu.Lock()
		defer n.stages.mu.Unlock()
		if h.dropped {
			return pipeline.Stage{}, false
		}
		h.refs++
		st.Live = func() bool {
			n.stages.mu.Lock()
			defer n.stages.mu.Unlock()
			return !h.dropped
		}
		st.Release = func() {
			n.stages.mu.Lock()
			h.refs--
			last := h.dropped && h.refs == 0
			n.stages.mu.Unlock()
			if last {
				n.closeStage(h)
			}
		}
		return st, true
	}, n.peerConn, n.cfg.Logger)
	if n.tracer != nil {
		n.stages.srv.TraceWith(n.tracer.StartRemoteChild)
	}
}

// syncStages follows the sharded placements: for each pipeline with a
// stage here it loads that stage (the first as a pool model running its
// layers then the rest over a Pipeline stream, a later one as a
// StageModel the Pipeline service runs) and reports it Ready (or Failed);
// stages of older generations or no longer placed here are dropped.
func (n *Node) syncStages(ctx context.Context) {
	m := n.member
	type mine struct {
		p *clusterpb.Placement
		i int
	}
	want := map[string]mine{}
	for _, p := range m.Assignments() {
		if p.NumLayers == 0 {
			continue
		}
		for i, st := range p.Stages {
			if st.Node == m.ID() {
				want[p.Model] = mine{p, i}
			}
		}
	}
	// Drop what is not wanted any more (or wanted in another shape).
	var drop []*heldStage
	n.stages.mu.Lock()
	if n.stages.held == nil {
		n.stages.held = map[string]*heldStage{}
	}
	for name, h := range n.stages.held {
		if w, ok := want[name]; !ok || w.i == 0 || w.p.Generation != h.generation {
			delete(n.stages.held, name)
			if h.drop() {
				drop = append(drop, h)
			}
		}
	}
	n.stages.mu.Unlock()
	for _, h := range drop {
		n.closeStage(h)
	}
	for _, name := range n.runner.Pipelines() {
		if w, ok := want[name]; !ok || w.i != 0 {
			if err := n.runner.SetPipeline(ctx, name, nil); err != nil {
				n.cfg.Logger.Debug("cluster: leaving a pipeline", "model", name, "err", err)
			}
		}
	}
	for name, w := range want {
		n.syncStage(ctx, name, w.p, w.i)
	}
}

// syncStage loads stage i of p here if it is not loaded yet, and reports
// its state.
func (n *Node) syncStage(ctx context.Context, name string, p *clusterpb.Placement, i int) {
	m := n.member
	st := p.Stages[i]
	layers := model.Range{Start: int(st.LayerStart), End: int(st.LayerEnd)}
	report := func(state clusterpb.StageState) bool {
		err := m.ReportStage(ctx, name, p.Replica, p.Generation, state)
		if err != nil && ctx.Err() == nil {
			n.cfg.Logger.Debug("cluster: report stage", "model", name, "err", err)
		}
		return err == nil
	}
	if i == 0 {
		if cur, ok := n.runner.PipelineOf(name); ok && cur.Generation == p.Generation {
			if st.State != clusterpb.StageState_STAGE_STATE_READY && st.State != clusterpb.StageState_STAGE_STATE_FAILED {
				report(clusterpb.StageState_STAGE_STATE_READY)
			}
			return
		}
		next := grpcOf(m, p.Stages[1].Node)
		if next == "" {
			return // the next stage's node is not known here yet: next round
		}
		down := pipeline.NewClient(name, p.Generation, next, n.peerConn)
		err := n.runner.SetPipeline(ctx, name, &runner.Pipeline{Layers: layers, Generation: p.Generation, Down: down, Stages: len(p.Stages)})
		if err != nil {
			_ = down.Close()
			if errors.Is(err, runner.ErrBusy) {
				return // requests of the old shape still run: next round
			}
			n.cfg.Logger.Warn("cluster: pipeline first stage failed to load", "model", name, "err", err)
			report(clusterpb.StageState_STAGE_STATE_FAILED)
			return
		}
		n.cfg.Logger.Info("cluster: pipeline first stage loaded", "model", name, "layers", layers.String(), "generation", p.Generation)
		report(clusterpb.StageState_STAGE_STATE_READY)
		return
	}
	n.stages.mu.Lock()
	h := n.stages.held[name]
	n.stages.mu.Unlock()
	if h == nil {
		sm, err := n.runner.LoadStage(ctx, name, layers)
		if err != nil {
			n.cfg.Logger.Warn("cluster: pipeline stage failed to load", "model", name, "layers", layers.String(), "err", err)
			report(clusterpb.StageState_STAGE_STATE_FAILED)
			return
		}
		h = &heldStage{generation: p.Generation, layers: layers, sm: sm}
		if i+1 < len(p.Stages) {
			h.next = p.Stages[i+1].Node
		}
		n.stages.mu.Lock()
		n.stages.held[name] = h
		n.stages.mu.Unlock()
	}
	if !h.reported && report(clusterpb.StageState_STAGE_STATE_READY) {
		n.stages.mu.Lock()
		h.reported = true
		n.stages.mu.Unlock()
	}
}

func (n *Node) closeStage(h *heldStage) {
	if err := h.sm.Close(); err != nil {
		n.cfg.Logger.Warn("cluster: closing a pipeline stage", "err", err)
	}
}

// closeStages frees the later stages held here (the node is stopping;
// a stage a stream still holds closes when the stream ends).
func (n *Node) closeStages() {
	n.stages.mu.Lock()
	var drop []*heldStage
	for _, h := range n.stages.held {
		if h.drop() {
			drop = append(drop, h)
		}
	}
	n.stages.held = nil
	n.stages.mu.Unlock()
	for _, h := range drop {
		n.closeStage(h)
	}
}
