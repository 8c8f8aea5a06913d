package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// Automatic sharding. A model's need is what its nodes report in their
// inventories (Inventory.ModelBytes: its weights plus the KV cache of one
// sequence at its configured context); a node's capacity is its memory
// budget (Inventory.MemoryBudget, the bytes its models' weights and
// pipeline stages may hold; the machine's free memory when a node does
// not say). A model that some usable node's capacity holds whole is
// placed whole; one that none holds is sharded across the fewest nodes,
// largest capacity first, whose capacities hold its stages' shares, with
// layer ranges by compute cost per token (planStages); one that all of
// them together cannot hold is not placed, and requests for it are
// refused with ErrInsufficientMemory naming the need and the total.

// ErrInsufficientMemory: the live nodes' memory budgets together cannot
// hold a model.
var ErrInsufficientMemory = errors.New("insufficient memory")

// capacity is what a node can give a model's weights and KV.
func (inv Inventory) capacity() int64 {
	if inv.MemoryBudget > 0 {
		return inv.MemoryBudget
	}
	return inv.MemoryFree
}

// fit says how a model of need bytes goes on cands (sorted as
// shardCandidates sorts them): 1 when a candidate holds it whole (or the
// need is unknown), k ≥ 2 for the fewest candidates, in
// their order, whose capacities add up to it with every stage's share of
// the layers within its node's capacity, 0 when none do. total is the
// capacity of all candidates.
func fit(need int64, cands []shardCand) (stages int, total int64) {
	for _, c := range cands {
		total += c.free
	}
	if need <= 0 || len(cands) == 0 {
		return 1, total
	}
	for _, c := range cands {
		if c.free >= need {
			return 1, total
		}
	}
	for k := 2; k <= len(cands) && k <= MaxStages; k++ {
		if k > cands[0].layers {
			break // more stages than layers
		}
		if p := planStages("", 0, k, need, cands); p != nil && len(p.Stages) == k {
			return k, total
		}
	}
	return 0, total
}

// modelNeed is the largest need the inventories report for model.
func modelNeed(model string, nodes map[string]*pb.Node) int64 {
	var need int64
	for _, n := range nodes {
		var inv Inventory
		if json.Unmarshal(n.Inventory, &inv) == nil {
			need = max(need, inv.ModelBytes[model])
		}
	}
	return need
}

// Fit tells, from the replicated inventories and local gossip, how model
// goes on the usable nodes that have it: stages 1 when one of them holds
// it whole, k ≥ 2 when it needs k of them as a pipeline, and an error
// wrapping ErrInsufficientMemory when all of them together cannot hold it.
func (m *Member) Fit(model string) (stages int, err error) {
	nodes := map[string]*pb.Node{}
	m.fsm.Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			nodes[n.Id] = n
		}
	})
	return fitError(model, nodes, usableIn(nodes, m.peerSnapshot()))
}

func fitError(model string, nodes map[string]*pb.Node, usable func(string) bool) (int, error) {
	need := modelNeed(model, nodes)
	cands := shardCandidates(model, PlacementSpec{}, nodes, usable)
	k, total := fit(need, cands)
	if k > 0 {
		return k, nil
	}
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.id
	}
	split := ""
	if total >= need && len(cands) > 0 {
		split = fmt.Sprintf(", but split by whole layers (%d bytes each) they cannot hold it", need/int64(max(cands[0].layers, 1)))
	}
	return 0, fmt.Errorf("%w: %q needs %d bytes (weights and the KV cache of one sequence at its context); the memory budgets of the live nodes that have it (%s) total %d%s",
		ErrInsufficientMemory, model, need, strings.Join(slices.Sorted(slices.Values(ids)), ", "), total, split)
}
