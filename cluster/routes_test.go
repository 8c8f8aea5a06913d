package cluster

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
)

func routeIDs(m *Member, model string) ([]string, bool) {
	rs, known := m.Routes(model)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids, known
}

func sameIDs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRoutes: inventories and Ready placements make a model routable on
// alive, non-draining nodes; a killed follower drops out as soon as
// gossip declares it failed (within detectionBound), without waiting for
// the catalog.
func TestRoutes(t *testing.T) {
	nodes := startCluster(t, 3, "")
	ctx := context.Background()
	invs := map[string]Inventory{
		"n1": {ModelsLoaded: []string{"m1"}},
		"n2": {ModelsOnDisk: []string{"m1", "m3"}},
		"n3": {ModelsLoaded: []string{"m2", "m1"}, MemoryFree: 1 << 30},
	}
	for _, m := range nodes {
		if err := m.SetInventory(ctx, invs[m.ID()]); err != nil {
			t.Fatal(err)
		}
	}
	r, err := nodes[0].Apply(ctx, &pb.PlacementPut{Placement: &pb.Placement{Model: "m3", Stages: []*pb.Stage{{Node: "n2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Apply(ctx, &pb.PlacementSetState{Model: "m3", Generation: r.Value, Node: "n2", State: pb.StageState_STAGE_STATE_READY}); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, nodes)
	tests := []struct {
		model string
		want  []string
		known bool
	}{
		{"m1", []string{"n1", "n3"}, true},
		{"m2", []string{"n3"}, true},
		{"m3", []string{"n2"}, true},
		{"unknown", nil, false},
	}
	for _, m := range nodes {
		for _, tc := range tests {
			ids, known := routeIDs(m, tc.model)
			if !sameIDs(ids, tc.want) || known != tc.known {
				t.Fatalf("%s: Routes(%s) = %v %v, want %v %v", m.ID(), tc.model, ids, known, tc.want, tc.known)
			}
		}
	}
	if rs, _ := nodes[0].Routes("m2"); rs[0].GRPC != nodes[2].GRPCAddr() {
		t.Fatalf("route address %q, want %q", rs[0].GRPC, nodes[2].GRPCAddr())
	}

	if err := nodes[0].SetDraining(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "draining n1 out of the routes", func() bool {
		ids, _ := routeIDs(nodes[1], "m1")
		return sameIDs(ids, []string{"n3"})
	})
	// n3, the only route left, is killed as a follower: the route goes
	// within memberlist's detection bound, with no election in the way.
	if nodes[2].IsLeader() {
		if err := nodes[2].raft.LeadershipTransfer().Error(); err != nil {
			t.Fatal(err)
		}
		t.Logf("n3 led; leadership moved to %s", waitLeader(t, nodes, 5*time.Second).ID())
	}
	if nodes[2].IsLeader() {
		t.Fatal("n3 still leads")
	}
	bound := detectionBound(TestTiming(), len(nodes))
	nodes[2].Close()
	took := waitFor(t, 10*time.Second, "killed n3 out of the routes", func() bool {
		ids, known := routeIDs(nodes[1], "m1")
		return len(ids) == 0 && known
	})
	t.Logf("killed follower unroutable after %v (bound %v)", took, bound)
	if took > bound+2*time.Second { // 2 s for a loaded CI machine
		t.Fatalf("killed follower routable for %v, bound %v + 2 s", took, bound)
	}
}

// detectionBound is the longest memberlist takes, with t's timings and n
// members, to declare a crashed node dead: members are probed round
// robin, one per ProbeInterval, so the dead one within n intervals (its
// probe timeout and indirect probes fit in one); the suspicion lasts
// SuspicionMult × max(1, log10 n) intervals (no confirmations are
// awaited when SuspicionMult − 2 > n − 2); the death spreads in a couple
// of gossip rounds.
func detectionBound(t Timing, n int) time.Duration {
	susp := time.Duration(float64(t.SuspicionMult) * math.Max(1, math.Log10(float64(n))) * float64(t.ProbeInterval))
	return time.Duration(n)*t.ProbeInterval + susp + 2*t.GossipInterval
}

func TestStats(t *testing.T) {
	nodes := startCluster(t, 3, "")
	leader := waitLeader(t, nodes, 5*time.Second)
	if _, err := put(context.Background(), nodes[0], "k", "v"); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, nodes)
	for _, m := range nodes {
		st := m.Stats()
		if st.Leader != leader.ID() || st.Voters != 3 || st.Servers != 3 || st.Members != 3 || st.AppliedIndex == 0 || st.Term == 0 {
			t.Fatalf("%s: %+v", m.ID(), st)
		}
		if m == leader && (st.State != "Leader" || st.LastContact != 0) {
			t.Fatalf("leader stats %+v", st)
		}
		if m != leader && (st.State != "Follower" || st.LastContact < 0 || st.LastContact > 5*time.Second) {
			t.Fatalf("follower stats %+v", st)
		}
	}
}

func TestCommandSizeLimit(t *testing.T) {
	nodes := startCluster(t, 2, "")
	leader := waitLeader(t, nodes, 5*time.Second)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	ctx := context.Background()
	big := make([]byte, DefaultMaxCommandBytes-1024) // fits, forwarded over gRPC
	if _, err := follower.Apply(ctx, &pb.SettingPut{Key: "big", Value: big}); err != nil {
		t.Fatalf("a command under the limit: %v", err)
	}
	tooBig := make([]byte, DefaultMaxCommandBytes+1)
	if _, err := follower.Apply(ctx, &pb.SettingPut{Key: "huge", Value: tooBig}); !errors.Is(err, ErrCommandTooLarge) {
		t.Fatalf("a command over the limit: %v", err)
	}
}

// TestUnheard: a peer is unheard until the catalog holds the inventory
// whose fingerprint it gossips: before its first report, and again while
// a newer report has been announced but not written yet (the first half
// of SetInventory alone). Draining peers and this node itself are never
// listed.
func TestUnheard(t *testing.T) {
	nodes := startCluster(t, 3, "")
	ctx := context.Background()
	unheard := func(m *Member) []string {
		var ids []string
		for _, r := range m.Unheard() {
			ids = append(ids, r.ID)
		}
		return ids
	}
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	waitFor(t, 10*time.Second, "n1 sees its peers alive and unheard", func() bool {
		return sameIDs(unheard(n1), []string{"n2", "n3"})
	})

	for _, m := range []*Member{n2, n3} {
		if err := m.SetInventory(ctx, Inventory{ModelsOnDisk: []string{"m-" + m.ID()}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "n1 heard n2 and n3", func() bool { return len(unheard(n1)) == 0 })
	if rs := n1.Unheard(); rs != nil {
		t.Fatalf("heard everyone, Unheard = %+v", rs)
	}

	// n3 announces a new inventory, not written yet.
	n3.announceInventory(Inventory{ModelsOnDisk: []string{"m-n3", "m-new"}})
	waitFor(t, 10*time.Second, "n1 sees n3's announced inventory unheard", func() bool {
		return sameIDs(unheard(n1), []string{"n3"})
	})
	if _, known := n1.Routes("m-new"); known {
		t.Fatal("m-new known without its inventory")
	}
	// The write goes through: heard again.
	if err := n3.SetInventory(ctx, Inventory{ModelsOnDisk: []string{"m-new", "m-n3"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n1 heard n3's new inventory", func() bool { return len(unheard(n1)) == 0 })
	if _, known := n1.Routes("m-new"); !known {
		t.Fatal("m-new unknown once n3's inventory is heard")
	}

	// A draining peer takes no requests: not worth asking.
	n2.announceInventory(Inventory{ModelsOnDisk: []string{"other"}})
	waitFor(t, 10*time.Second, "n2 unheard", func() bool { return sameIDs(unheard(n1), []string{"n2"}) })
	if err := n2.SetDraining(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a draining n2 is not listed", func() bool { return len(unheard(n1)) == 0 })
}
