package cluster

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// Downloads for a placement. The planner places a model only on nodes
// that have its files, so a model fetched from a hub for a placement
// must first land on the nodes that placement will take. DownloadNodes
// chooses them before any file is there, from what the hub says of the
// weights' size and the nodes' replicated inventories, the way the
// planner will: pinned nodes first, then nodes that already have the
// model, then the most capacity, then id. The need is the weights'
// bytes alone (the KV cache of a sequence is not known before the
// config is read); the planner checks the exact need once the files are
// there, and a placement that asks for its stages is not resized.

// ErrTooFewNodes: a placement needs more usable nodes than the cluster has.
var ErrTooFewNodes = errors.New("too few nodes")

// DownloadPlan is the nodes a placement of a model takes.
type DownloadPlan struct {
	// Stages is the stages of each replica group (1: whole replicas).
	Stages int `json:"stages"`
	// Nodes are the placement's nodes, replica group after replica group.
	Nodes []string `json:"nodes"`
	// Have are those of Nodes that already have the model (on disk or
	// loaded): nothing is fetched there.
	Have []string `json:"have,omitempty"`
}

// DownloadNodes chooses the nodes a placement spec of model takes when
// its weights are need bytes (≤ 0: unknown, whole replicas unless the
// spec asks for stages): spec.Replicas (at least 1) groups of
// spec.Stages nodes, or with no stages asked, of the fewest whose
// capacities add up to need (one node holding it whole for 1). It fails with
// ErrTooFewNodes or ErrInsufficientMemory, naming the nodes it had.
func (m *Member) DownloadNodes(model string, spec PlacementSpec, need int64) (DownloadPlan, error) {
	nodes := map[string]*pb.Node{}
	m.fsm.Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			nodes[n.Id] = n
		}
	})
	return downloadNodes(model, spec, need, nodes, usableIn(nodes, m.peerSnapshot()))
}

// downloadCand is a usable node as DownloadNodes ranks it.
type downloadCand struct {
	id   string
	pin  int // index in the spec's pins (len(pins) when not pinned)
	has  bool
	free int64 // capacity, 0 when the node reports none
}

func downloadNodes(model string, spec PlacementSpec, need int64, nodes map[string]*pb.Node, usable func(string) bool) (DownloadPlan, error) {
	if spec.Stages < 0 || spec.Stages > MaxStages || spec.Replicas < 0 {
		return DownloadPlan{}, fmt.Errorf("%w: %d replicas, %d stages (at most %d)", ErrInvalidCommand, spec.Replicas, spec.Stages, MaxStages)
	}
	replicas := max(spec.Replicas, 1)
	var cands []downloadCand
	for id, n := range nodes {
		if !usable(id) {
			continue
		}
		var inv Inventory
		_ = json.Unmarshal(n.Inventory, &inv) // a node with no inventory yet has nothing and reports no capacity
		pin := slices.Index(spec.Pin, id)
		if pin < 0 {
			pin = len(spec.Pin)
		}
		cands = append(cands, downloadCand{id: id, pin: pin, free: inv.capacity(),
			has: slices.Contains(inv.ModelsOnDisk, model) || slices.Contains(inv.ModelsLoaded, model)})
	}
	slices.SortFunc(cands, func(a, b downloadCand) int {
		if c := cmp.Compare(a.pin, b.pin); c != 0 {
			return c
		}
		if a.has != b.has {
			if a.has {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.free, a.free); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	// groups are the first replicas·k of cands (for whole replicas, of
	// those whose capacity holds need) in consecutive groups of k, when
	// each group's capacities add up to need (a node reporting no
	// capacity bounds nothing, as for the planner).
	groups := func(k int) []downloadCand {
		cs := cands
		if k == 1 {
			cs = slices.DeleteFunc(slices.Clone(cands), func(c downloadCand) bool { return need > 0 && c.free > 0 && c.free < need })
		}
		if len(cs) < replicas*k {
			return nil
		}
		cs = cs[:replicas*k]
		for g := range replicas {
			var sum int64
			for _, c := range cs[g*k : (g+1)*k] {
				if c.free <= 0 {
					sum = need
					break
				}
				sum += c.free
			}
			if sum < need {
				return nil
			}
		}
		return cs
	}
	ks := []int{spec.Stages}
	if spec.Stages < 2 {
		ks = ks[:0]
		for k := 1; k <= MaxStages; k++ {
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		if cs := groups(k); cs != nil {
			plan := DownloadPlan{Stages: k}
			for _, c := range cs {
				plan.Nodes = append(plan.Nodes, c.id)
				if c.has {
					plan.Have = append(plan.Have, c.id)
				}
			}
			return plan, nil
		}
	}
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = fmt.Sprintf("%s (%d bytes)", c.id, c.free)
	}
	if len(cands) < replicas*max(spec.Stages, 1) {
		return DownloadPlan{}, fmt.Errorf("%w: %d replicas of %d stages of %q need %d nodes; %d are usable: %s",
			ErrTooFewNodes, replicas, max(spec.Stages, 1), model, replicas*max(spec.Stages, 1), len(cands), strings.Join(ids, ", "))
	}
	return DownloadPlan{}, fmt.Errorf("%w: %d replicas of %q, whose weights are %d bytes, fit no split over the usable nodes' capacities: %s",
		ErrInsufficientMemory, replicas, model, need, strings.Join(ids, ", "))
}

// HoldingNodes are the nodes, not draining, whose replicated
// inventories have model, on disk or loaded, sorted by id (a benchmark
// asked of "each node holding the model" runs on those of them that are
// live).
func (m *Member) HoldingNodes(model string) []string {
	var out []string
	m.fsm.Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			var inv Inventory
			if n.Draining || json.Unmarshal(n.Inventory, &inv) != nil {
				continue
			}
			if slices.Contains(inv.ModelsOnDisk, model) || slices.Contains(inv.ModelsLoaded, model) {
				out = append(out, n.Id)
			}
		}
	})
	slices.Sort(out)
	return out
}
