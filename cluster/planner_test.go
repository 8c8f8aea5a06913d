package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

func groupsOf(m *Member, model string) map[uint32]*pb.Placement {
	out := map[uint32]*pb.Placement{}
	for _, p := range m.Placements() {
		if p.Model == model {
			out[p.Replica] = p
		}
	}
	return out
}

// TestPlanner: desired replicas are placed on nodes that have the model
// (pins first, then free memory), owners report Ready and become
// routable, a failed node's replica moves after the grace with a new
// generation (the old owner's late report is fenced off), and lowering
// the replica count deletes the extra group.
func TestPlanner(t *testing.T) {
	fast := func(c *Config) { c.PlanInterval = 100 * time.Millisecond; c.FailoverGrace = 500 * time.Millisecond }
	nodes := []*Member{testNode(t, "n1", t.TempDir(), nil, 3, "", fast)}
	seed := []string{nodes[0].GossipAddr()}
	for _, id := range []string{"n2", "n3"} {
		nodes = append(nodes, testNode(t, id, t.TempDir(), seed, 3, "", fast))
	}
	waitLeader(t, nodes, 10*time.Second)
	byID := map[string]*Member{}
	for _, m := range nodes {
		byID[m.ID()] = m
	}
	ctx := context.Background()
	invs := map[string]Inventory{
		"n1": {ModelsOnDisk: []string{"m", "p"}, MemoryFree: 10},
		"n2": {ModelsOnDisk: []string{"m", "p"}, MemoryFree: 30},
		"n3": {ModelsOnDisk: []string{"m"}, MemoryFree: 20},
	}
	for _, m := range nodes {
		if err := m.SetInventory(ctx, invs[m.ID()]); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[0].SetPlacementSpec(ctx, "m", PlacementSpec{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].SetPlacementSpec(ctx, "p", PlacementSpec{Replicas: 1, Pin: []string{"n1"}}); err != nil {
		t.Fatal(err)
	}
	var g map[uint32]*pb.Placement
	waitFor(t, 5*time.Second, "m placed on the two nodes with the most free memory, p on its pin", func() bool {
		g = groupsOf(nodes[0], "m")
		p := groupsOf(nodes[0], "p")
		return len(g) == 2 && g[0].Stages[0].Node == "n2" && g[1].Stages[0].Node == "n3" &&
			len(p) == 1 && p[0].Stages[0].Node == "n1"
	})
	// The owners load and report Ready: the model becomes routable there.
	for _, r := range []uint32{0, 1} {
		owner := byID[g[r].Stages[0].Node]
		if err := owner.ReportStage(ctx, "m", r, g[r].Generation, pb.StageState_STAGE_STATE_READY); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "m routable on n2 and n3", func() bool {
		ids, _ := routeIDs(nodes[0], "m")
		return sameIDs(ids, []string{"n2", "n3"})
	})

	// n3 dies: after the grace its replica moves to n1 with a new generation.
	old := g[1]
	byID["n3"].Close()
	var moved *pb.Placement
	waitFor(t, 15*time.Second, "replica 1 moved off the dead node", func() bool {
		moved = groupsOf(nodes[0], "m")[1]
		return moved != nil && moved.Stages[0].Node == "n1"
	})
	if moved.Generation <= old.Generation {
		t.Fatalf("generation %d after move, was %d", moved.Generation, old.Generation)
	}
	_, err := nodes[1].Apply(ctx, &pb.PlacementSetState{Model: "m", Replica: 1, Generation: old.Generation, Node: "n3", State: pb.StageState_STAGE_STATE_READY})
	if !errors.Is(err, fsm.ErrStale) {
		t.Fatalf("late report for the old generation: %v", err)
	}

	if err := nodes[0].SetPlacementSpec(ctx, "m", PlacementSpec{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the extra replica deleted", func() bool {
		g := groupsOf(nodes[0], "m")
		return len(g) == 1 && g[0] != nil
	})
}

// TestPlannerPrefersLessLoaded: between nodes alike in pins, loaded
// models and memory, the planner places on the least loaded (the load
// each node gossips).
func TestPlannerPrefersLessLoaded(t *testing.T) {
	fast := func(c *Config) { c.PlanInterval = 100 * time.Millisecond }
	nodes := []*Member{testNode(t, "n1", t.TempDir(), nil, 3, "", fast)}
	seed := []string{nodes[0].GossipAddr()}
	for _, id := range []string{"n2", "n3"} {
		nodes = append(nodes, testNode(t, id, t.TempDir(), seed, 3, "", fast))
	}
	leader := waitLeader(t, nodes, 10*time.Second)
	ctx := context.Background()
	loads := map[string]int64{"n1": 50, "n2": 3, "n3": 10}
	for _, m := range nodes {
		if err := m.SetInventory(ctx, Inventory{ModelsOnDisk: []string{"q"}, MemoryFree: 100}); err != nil {
			t.Fatal(err)
		}
		m.SetLoad(loads[m.ID()])
	}
	waitFor(t, 5*time.Second, "the loads gossiped to the leader", func() bool {
		peers := leader.peerSnapshot()
		for id, l := range loads {
			if peers[id].meta.Load != l {
				return false
			}
		}
		return true
	})
	if err := nodes[0].SetPlacementSpec(ctx, "q", PlacementSpec{Replicas: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "q placed on the two least loaded nodes", func() bool {
		g := groupsOf(nodes[0], "q")
		return len(g) == 2 && g[0] != nil && g[1] != nil && g[0].Stages[0].Node == "n2" && g[1].Stages[0].Node == "n3"
	})
}
