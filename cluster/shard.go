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
	"time"

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
		p, hops := chooseStages(model, r, spec.Stages, need, free, m.cfg.RTT.unknown())
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
		m.log.Info("planner: placed a pipeline", "model", model, "replica", r, "stages", stagesString(p), "hop_rtt_us", hops)
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
	pinned bool             // named in the spec's pins: always among the stages
	free   int64            // its capacity (memory budget, else free memory), from the inventory
	layers int              // the model's layers, from the inventory
	head   float64          // the model's output head in layers of compute, from the inventory
	maxCut int              // the last layer a later stage may start at (0: any), from the inventory
	costs  layersplit.Costs // the model's per-layer bytes and compute, from the inventory (empty: unknown)
	// rtt is the node's published round trip to each peer in µs
	// (Inventory.RTTMicros).
	rtt map[string]int64
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
		cs = append(cs, shardCand{id: id, pin: pin, pinned: pin < len(spec.Pin), free: inv.capacity(),
			layers: inv.Layers[model], head: inv.HeadLayers[model], maxCut: inv.MaxCut[model], costs: inv.Costs[model], rtt: inv.RTTMicros})
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
// stage's bytes within its node's capacity (its layers' bytes and the
// edges' when the inventory has the model's costs, else its share of the
// need), at least one layer each, in candidate order. With one candidate
// the group is unsharded; with none, candidates that disagree on the
// layer count, or ranges no split fits in the capacities, nil.
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
	bounds, ok := layersplit.Split(layersplit.Model{Layers: layers, Head: cands[k-1].head, Need: need, MaxCut: cands[0].maxCut, Costs: cands[0].costs}, k, caps)
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

// maxPlanSteps bounds the search of chooseStages (partial stage orders
// visited) and maxPlanSplits the layer splits it tries (each is
// O(stages × layers²)); past either the best order found so far stands.
// Clusters of a few Macs reach neither when a plan exists: 8 candidates in
// 4 stages are at most 1,680 orders, and a split is tried only for an
// order cheaper than the best so far. They bound the passes of a group
// that fits in no order, which the planner retries every PlanInterval.
const (
	maxPlanSteps  = 200_000
	maxPlanSplits = 1000
)

// chooseStages shards a model of need bytes into min(stages, candidates,
// layers) stages like planStages, choosing which candidates and in which
// order: among the orders planStages can place (layer counts agree, every
// stage's share within its node's capacity), the one with the lowest sum
// of hop round trips along the stage order (hopRTT; unknown for a hop no
// node measured), every pinned candidate among them (as many as there are
// stages). Ties keep the candidates' order (pins, then capacity, then id),
// so with no RTT known the plan is planStages' on the first candidates.
// hops is the plan's hop sum in µs.
func chooseStages(model string, replica uint32, stages int, need int64, cands []shardCand, unknown time.Duration) (p *pb.Placement, hops int64) {
	k := min(stages, len(cands))
	if k > 0 && cands[0].layers > 0 {
		k = min(k, cands[0].layers)
	}
	if k <= 1 {
		return planStages(model, replica, k, need, cands), 0
	}
	n := len(cands)
	cost := make([][]int64, n)
	for i := range cands {
		cost[i] = make([]int64, n)
		for j := range cands {
			cost[i][j] = hopRTT(cands[i], cands[j], unknown)
		}
	}
	required := 0 // the pinned candidates come first
	for required < n && cands[required].pinned {
		required++
	}
	required = min(required, k)
	var (
		seq    = make([]int, 0, k)
		order  = make([]shardCand, k)
		used   = make([]bool, n)
		steps  int
		splits int
		// Orders whose capacities and head, stage by stage, no split
		// fits: identical machines make many orders alike.
		unfit = map[string]bool{}
	)
	var walk func(sum int64, missing int)
	walk = func(sum int64, missing int) {
		steps++
		if steps > maxPlanSteps || splits >= maxPlanSplits || p != nil && sum >= hops || k-len(seq) < missing {
			return
		}
		if len(seq) == k {
			var key strings.Builder
			for i, c := range seq {
				order[i] = cands[c]
				fmt.Fprintf(&key, "%d/%d,", cands[c].free, cands[c].layers)
			}
			fmt.Fprintf(&key, "%g", order[k-1].head)
			if unfit[key.String()] {
				return
			}
			splits++
			if q := planStages(model, replica, k, need, order); q != nil {
				p, hops = q, sum
			} else {
				unfit[key.String()] = true
			}
			return
		}
		for i := range n {
			if used[i] {
				continue
			}
			next := sum
			if len(seq) > 0 {
				next += cost[seq[len(seq)-1]][i]
			}
			m := missing
			if i < required {
				m--
			}
			used[i] = true
			seq = append(seq, i)
			walk(next, m)
			seq = seq[:len(seq)-1]
			used[i] = false
		}
	}
	walk(0, required)
	return p, hops
}

// hopRTT is the round trip between two candidates in µs: the mean of what
// each published to the other, the one published when only one did, else
// unknown.
func hopRTT(a, b shardCand, unknown time.Duration) int64 {
	x, okx := a.rtt[b.id]
	y, oky := b.rtt[a.id]
	switch {
	case okx && oky:
		return (x + y) / 2
	case okx:
		return x
	case oky:
		return y
	}
	return unknown.Microseconds()
}
