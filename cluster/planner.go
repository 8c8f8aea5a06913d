package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// PlacementSpecPrefix starts the setting keys holding desired placements:
// "placement/<model>" → PlacementSpec as JSON.
const PlacementSpecPrefix = "placement/"

// PlacementSpec is the desired placement of one model.
type PlacementSpec struct {
	Replicas int      `json:"replicas"`
	Pin      []string `json:"pin,omitempty"` // preferred nodes, best first
	// Stages ≥ 2 shards each replica group into that many pipeline
	// stages on distinct nodes, by layer ranges (see planSharded).
	Stages int `json:"stages,omitempty"`
}

// SetPlacementSpec stores a model's desired placement; Replicas 0 removes
// its replica groups.
func (m *Member) SetPlacementSpec(ctx context.Context, model string, spec PlacementSpec) error {
	if model == "" || spec.Replicas < 0 || spec.Stages < 0 || spec.Stages > MaxStages {
		return fmt.Errorf("%w: model %q, %d replicas, %d stages (at most %d)", ErrInvalidCommand, model, spec.Replicas, spec.Stages, MaxStages)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	_, err = m.Apply(ctx, &pb.SettingPut{Key: PlacementSpecPrefix + model, Value: b})
	return err
}

// PlacementSpecOf is the desired placement of model, if one is set.
func (m *Member) PlacementSpecOf(model string) (PlacementSpec, bool) {
	var (
		spec PlacementSpec
		ok   bool
	)
	m.fsm.Read(func(s *fsm.State) {
		for _, st := range s.Settings() {
			if st.Key == PlacementSpecPrefix+model {
				ok = json.Unmarshal(st.Value, &spec) == nil
			}
		}
	})
	return spec, ok
}

// ReportStage records the lifecycle of this node's stage of a replica
// group (Loading, Ready, Failed, ...). A stale generation is refused with
// fsm.ErrStale: the group has moved on.
func (m *Member) ReportStage(ctx context.Context, model string, replica uint32, generation uint64, state pb.StageState) error {
	_, err := m.Apply(ctx, &pb.PlacementSetState{Model: model, Replica: replica, Generation: generation, Node: m.cfg.NodeID, State: state})
	return err
}

// Assignments returns the replica groups with a stage on this node.
func (m *Member) Assignments() []*pb.Placement {
	var out []*pb.Placement
	for _, p := range m.Placements() {
		for _, st := range p.Stages {
			if st.Node == m.cfg.NodeID {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// WatchPlacements calls fn after every change to placements applied on
// this node (and a Reset after a snapshot restore). fn must not block.
func (m *Member) WatchPlacements(fn func(fsm.Change)) (cancel func()) {
	return m.fsm.Subscribe(func(cs []fsm.Change) {
		for _, c := range cs {
			if c.Table == fsm.TablePlacements || c.Table == fsm.TableAll {
				fn(c)
			}
		}
	})
}

// plan runs on the leader: for every PlacementSpec it creates missing
// replica groups on the best candidate, moves a group whose node has been
// failed (or gone) for longer than FailoverGrace, or is draining, to another candidate
// (CAS → a new generation fences the old one), and deletes groups beyond
// the replica count. A candidate is alive in gossip and the catalog, not
// draining, has the model on disk or loaded, and hosts no other replica
// of it; pinned nodes first, then nodes that have it loaded, then the
// least loaded, then measured speed (see measuredSpeed), then the most
// free memory, then id.
func (m *Member) plan(ctx context.Context) {
	var (
		specs  = map[string]PlacementSpec{}
		nodes  = map[string]*pb.Node{}
		groups = map[string]map[uint32]*pb.Placement{}
		speeds = map[string]map[string]float64{} // model → node → measured decode tok/s
	)
	m.fsm.Read(func(s *fsm.State) {
		for _, st := range s.Settings() {
			model, ok := strings.CutPrefix(st.Key, PlacementSpecPrefix)
			var spec PlacementSpec
			if ok && json.Unmarshal(st.Value, &spec) == nil {
				specs[model] = spec
			}
		}
		for _, n := range s.Nodes() {
			nodes[n.Id] = n
		}
		for _, p := range s.Placements() {
			if groups[p.Model] == nil {
				groups[p.Model] = map[uint32]*pb.Placement{}
			}
			groups[p.Model][p.Replica] = p
		}
		for model := range specs {
			speeds[model] = measuredSpeeds(s.Profiles(model))
		}
	})
	peers := m.peerSnapshot()
	now := time.Now()
	usable := usableIn(nodes, peers)
	// A draining node's replicas move to another candidate (the drain
	// waits for that); with none, they stay.
	draining := func(id string) bool {
		n, ok := nodes[id]
		p, okp := peers[id]
		return ok && n.Draining || okp && p.meta.Draining
	}
	gone := func(id string) bool {
		n, ok := nodes[id]
		if !ok {
			return true
		}
		return n.Status != pb.NodeStatus_NODE_STATUS_ALIVE &&
			now.Sub(time.Unix(0, n.StatusTimeUnixNano)) > m.cfg.FailoverGrace
	}
	for _, model := range sortedIDs(specs) {
		spec := specs[model]
		have := groups[model]
		if spec.Stages < 2 && spec.Replicas > 0 {
			// A model no live node holds whole is sharded across the
			// fewest that hold it together; one they cannot hold together
			// is left unplaced (requests for it say so).
			switch k, err := fitError(model, nodes, usable); {
			case err != nil:
				m.log.Debug("planner: no placement", "model", model, "err", err)
				continue
			case k >= 2:
				spec.Stages = k
			}
		}
		if spec.Stages >= 2 {
			m.planSharded(ctx, model, spec, nodes, have, usable)
			continue
		}
		hosting := map[string]bool{}
		for _, g := range have {
			if int(g.Replica) < spec.Replicas && len(g.Stages) > 0 && !gone(g.Stages[0].Node) {
				hosting[g.Stages[0].Node] = true
			}
		}
		for r := range uint32(spec.Replicas) {
			g := have[r]
			drained := false
			if g != nil && g.NumLayers == 0 && len(g.Stages) == 1 && !gone(g.Stages[0].Node) {
				if !draining(g.Stages[0].Node) {
					continue // healthy, or within the grace (a sharded group is re-placed whole)
				}
				drained = true // moved when another node can take it
			}
			node := m.pick(model, spec, nodes, hosting, usable, func(id string) int64 { return peers[id].meta.Load }, speeds[model])
			if node == "" {
				continue
			}
			var expect uint64
			if g != nil {
				expect = g.ModifyIndex
				why := "moving a replica off a failed node"
				if drained {
					why = "moving a replica off a draining node"
				}
				m.log.Info("planner: "+why, "model", model, "replica", r, "from", g.Stages[0].Node, "to", node)
			}
			_, err := m.Apply(ctx, &pb.PlacementPut{Placement: &pb.Placement{Model: model, Replica: r,
				Stages: []*pb.Stage{{Node: node}}}, ExpectIndex: expect})
			if err != nil && !errors.Is(err, fsm.ErrConflict) {
				m.log.Warn("planner: place", "model", model, "replica", r, "err", err)
				continue
			}
			hosting[node] = true
		}
		for r, g := range have {
			if int(r) >= spec.Replicas {
				if _, err := m.Apply(ctx, &pb.PlacementDelete{Model: model, Replica: r, Generation: g.Generation}); err != nil &&
					!errors.Is(err, fsm.ErrStale) && !errors.Is(err, fsm.ErrNotFound) {
					m.log.Warn("planner: delete", "model", model, "replica", r, "err", err)
				}
			}
		}
	}
}

// pick returns the best candidate node for a new replica of model, ""
// when none: pinned first, then loaded, then least loaded, then measured
// speed (speed: node → decode tok/s of the model there; a node absent
// from it is unknown and ranks after every measured one), then most free
// memory, then id.
func (m *Member) pick(model string, spec PlacementSpec, nodes map[string]*pb.Node, hosting map[string]bool, usable func(string) bool, load func(string) int64, speed map[string]float64) string {
	type cand struct {
		id     string
		pin    int
		loaded bool
		load   int64   // gossiped generations in flight
		speed  float64 // measured decode tok/s, 0 when unknown
		free   int64
	}
	var cs []cand
	for id, n := range nodes {
		if hosting[id] || !usable(id) {
			continue
		}
		var inv Inventory
		if json.Unmarshal(n.Inventory, &inv) != nil {
			continue
		}
		loaded := slices.Contains(inv.ModelsLoaded, model)
		if !loaded && !slices.Contains(inv.ModelsOnDisk, model) {
			continue
		}
		pin := slices.Index(spec.Pin, id)
		if pin < 0 {
			pin = len(spec.Pin)
		}
		cs = append(cs, cand{id: id, pin: pin, loaded: loaded, load: load(id), speed: speed[id], free: inv.MemoryFree})
	}
	if len(cs) == 0 {
		return ""
	}
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.pin != b.pin:
			return a.pin - b.pin
		case a.loaded != b.loaded:
			if a.loaded {
				return -1
			}
			return 1
		case a.load != b.load:
			return cmp.Compare(a.load, b.load)
		case a.speed != b.speed:
			return cmp.Compare(b.speed, a.speed) // faster first; unknown (0) last
		case a.free != b.free:
			if a.free > b.free {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	return cs[0].id
}

// ProfileThroughput is the kind of the profiles a throughput benchmark
// writes (node's bench jobs); the planner reads their decode speed.
const ProfileThroughput = "throughput"

// throughputProfile is the part of a throughput profile's result (node's
// ThroughputResult) the planner reads.
type throughputProfile struct {
	Points []struct {
		Concurrency int     `json:"concurrency"`
		DecodeTokS  float64 `json:"decode_tok_s"`
	} `json:"points"`
}

// measuredSpeeds maps each node with a usable throughput profile among
// profiles (one model's) to its measured speed (measuredSpeed).
func measuredSpeeds(profiles []*pb.Profile) map[string]float64 {
	out := map[string]float64{}
	for _, p := range profiles {
		if p.Kind != ProfileThroughput {
			continue
		}
		if v, ok := measuredSpeed(p.Result); ok {
			out[p.Node] = v
		}
	}
	return out
}

// measuredSpeed is the one figure of a throughput profile the planner
// compares: the best decode tokens/s among the points at the lowest
// concurrency measured (normally 1) — a single stream's decode speed,
// which every throughput job measures whatever prompt lengths it was
// given (decode at the shortest prompt is usually the best). A result
// that does not parse, or has no positive finite figure, is unknown
// (false), never an error.
func measuredSpeed(result []byte) (float64, bool) {
	var r throughputProfile
	if json.Unmarshal(result, &r) != nil {
		return 0, false
	}
	lowest, best := 0, 0.0
	for _, pt := range r.Points {
		if pt.Concurrency < 1 || math.IsNaN(pt.DecodeTokS) || math.IsInf(pt.DecodeTokS, 0) || pt.DecodeTokS <= 0 {
			continue
		}
		switch {
		case lowest == 0 || pt.Concurrency < lowest:
			lowest, best = pt.Concurrency, pt.DecodeTokS
		case pt.Concurrency == lowest && pt.DecodeTokS > best:
			best = pt.DecodeTokS
		}
	}
	return best, lowest > 0
}

// usableIn tells whether a node may take a placement: alive in the
// catalog and in local gossip, and draining in neither.
func usableIn(nodes map[string]*pb.Node, peers map[string]peer) func(string) bool {
	return func(id string) bool {
		n, ok := nodes[id]
		p, okp := peers[id]
		return ok && okp && n.Status == pb.NodeStatus_NODE_STATUS_ALIVE && !n.Draining &&
			p.status == StatusAlive && !p.meta.Draining
	}
}
