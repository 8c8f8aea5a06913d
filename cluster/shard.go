package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/cluster/layersplit"
)

// MaxStages bounds PlacementSpec.Stages.
const MaxStages = 16

// planSharded keeps spec.Replicas pipeline groups of a model whose spec
// asks for stages. A group is (re)planned when it is missing, unsharded,
// has a stage on a node that is not usable (a broken pipeline is re-placed
// at once: none of its requests can run, so the failover grace of a
// replica does not apply), or has another number of stages than the spec
// while enough nodes are there to follow it. Groups beyond the replica
// count are deleted.
func (m *Member) planSharded(ctx context.Context, model string, spec PlacementSpec, nodes map[string]*pb.Node, have map[uint32]*pb.Placement, usable func(string) bool) {
	replicas := uint32(max(spec.Replicas, 1))
	cands := shardCandidates(model, spec, nodes, usable)
	need := modelNeed(model, nodes)
	hosting := map[string]bool{}
	healthy := func(g *pb.Placement) bool {
		if g == nil || g.NumLayers == 0 {
			return false
		}
		for _, st := range g.Stages {
			if !usable(st.Node) {
				return false
			}
		}
		return true
	}
	for _, g := range have {
		if g.Replica < replicas && healthy(g) {
			for _, st := range g.Stages {
				hosting[st.Node] = true
			}
		}
	}
	for r := range replicas {
		g := have[r]
		free := slices.DeleteFunc(slices.Clone(cands), func(c shardCand) bool { return hosting[c.id] })
		if healthy(g) && (len(g.Stages) == spec.Stages || len(free)+len(g.Stages) < spec.Stages) {
			continue
		}
		if g != nil && healthy(g) {
			// Reshaping a healthy group: its own nodes are candidates.
			for _, st := range g.Stages {
				delete(hosting, st.Node)
			}
			free = slices.DeleteFunc(slices.Clone(cands), func(c shardCand) bool { return hosting[c.id] })
		}
		p := planStages(model, r, spec.Stages, need, free)
		if p == nil {
			// Logged once until the group is placed again: the planner
			// retries every PlanInterval.
			if m.unplaced.first(model, r) {
				msg := "planner: a sharded model does not fit the live nodes"
				if g != nil {
					msg = "planner: a sharded model no longer fits the live nodes"
				}
				m.log.Warn(msg, "model", model, "replica", r, "stages", spec.Stages, "nodes", len(free), "need", need)
			}
			continue
		}
		m.unplaced.placed(model, r)
		var expect uint64
		if g != nil {
			expect = g.ModifyIndex
		}
		_, err := m.Apply(ctx, &pb.PlacementPut{Placement: p, ExpectIndex: expect})
		if err != nil && !errors.Is(err, fsm.ErrConflict) {
			m.log.Warn("planner: place stages", "model", model, "replica", r, "err", err)
			continue
		}
		m.log.Info("planner: placed a pipeline", "model", model, "replica", r, "stages", stagesString(p))
		for _, st := range p.Stages {
			hosting[st.Node] = true
		}
	}
	for r, g := range have {
		if r >= replicas {
			if _, err := m.Apply(ctx, &pb.PlacementDelete{Model: model, Replica: r, Generation: g.Generation}); err != nil &&
				!errors.Is(err, fsm.ErrStale) && !errors.Is(err, fsm.ErrNotFound) {
				m.log.Warn("planner: delete", "model", model, "replica", r, "err", err)
			}
		}
	}
}

// unplacedGroups remembers the sharded replica groups the planner found
// no placement for, so that it warns once per failure, not every pass.
type unplacedGroups struct {
	mu sync.Mutex
	m  map[string]bool // "model/replica"
}

// first records that model's replica r could not be placed and says
// whether that is news.
func (u *unplacedGroups) first(model string, r uint32) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	key := fmt.Sprintf("%s/%d", model, r)
	if u.m[key] {
		return false
	}
	if u.m == nil {
		u.m = map[string]bool{}
	}
	u.m[key] = true
	return true
}

// placed forgets an earlier failure of model's replica r.
func (u *unplacedGroups) placed(model string, r uint32) {
	u.mu.Lock()
	delete(u.m, fmt.Sprintf("%s/%d", model, r))
	u.mu.Unlock()
}

type shardCand struct {
	id     string
	pin    int
	free   int64   // its capacity (memory budget, else free memory), from the inventory
	layers int     // the model's layers, from the inventory
	head   float64 // the model's output head in layers of compute, from the inventory
}

// shardCandidates are the usable nodes with the model on disk and its
// layer count known, pinned first, then by most capacity, then id.
func shardCandidates(model string, spec PlacementSpec, nodes map[string]*pb.Node, usable func(string) bool) []shardCand {
	var cs []shardCand
	for id, n := range nodes {
		if !usable(id) {
			continue
		}
		var inv Inventory
		if json.Unmarshal(n.Inventory, &inv) != nil || inv.Layers[model] <= 0 ||
			!slices.Contains(inv.ModelsOnDisk, model) && !slices.Contains(inv.ModelsLoaded, model) {
			continue
		}
		pin := slices.Index(spec.Pin, id)
		if pin < 0 {
			pin = len(spec.Pin)
		}
		cs = append(cs, shardCand{id: id, pin: pin, free: inv.capacity(), layers: inv.Layers[model], head: inv.HeadLayers[model]})
	}
	slices.SortFunc(cs, func(a, b shardCand) int {
		if c := cmp.Compare(a.pin, b.pin); c != 0 {
			return c
		}
		if c := cmp.Compare(b.free, a.free); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return cs
}

// planStages shards a model of need bytes (0: unknown) over the first
// min(stages, len(cands)) candidates: layer ranges by compute cost per
// token (layersplit: the output head counted on the last stage), each
// stage's share of the need within its node's capacity, at least one
// layer each, in candidate order. With one candidate the group is
// unsharded; with none, candidates that disagree on the layer count, or
// ranges no split fits in the capacities, nil.
func planStages(model string, replica uint32, stages int, need int64, cands []shardCand) *pb.Placement {
	k := min(stages, len(cands))
	if k == 0 {
		return nil
	}
	cands = cands[:k]
	layers := cands[0].layers
	for _, c := range cands {
		if c.layers != layers {
			return nil
		}
	}
	k = min(k, layers)
	cands = cands[:k]
	if k == 1 {
		return &pb.Placement{Model: model, Replica: replica, Stages: []*pb.Stage{{Node: cands[0].id}}}
	}
	// Nodes that report no capacity at all bound nothing: the split is
	// by cost alone (as for an unknown need), not left unplaced.
	var caps []int64
	if slices.ContainsFunc(cands, func(c shardCand) bool { return c.free > 0 }) {
		caps = make([]int64, k)
		for i, c := range cands {
			caps[i] = c.free
		}
	}
	bounds, ok := layersplit.Split(layersplit.Model{Layers: layers, Head: cands[k-1].head, Need: need}, k, caps)
	if !ok {
		return nil
	}
	p := &pb.Placement{Model: model, Replica: replica, NumLayers: uint32(layers)}
	for i, c := range cands {
		p.Stages = append(p.Stages, &pb.Stage{Node: c.id, LayerStart: uint32(bounds[i]), LayerEnd: uint32(bounds[i+1])})
	}
	return p
}

// stagesString is "a[0,3) b[3,6)" for logs.
func stagesString(p *pb.Placement) string {
	parts := make([]string, len(p.Stages))
	for i, st := range p.Stages {
		parts[i] = fmt.Sprintf("%s[%d,%d)", st.Node, st.LayerStart, st.LayerEnd)
	}
	return strings.Join(parts, " ")
}
