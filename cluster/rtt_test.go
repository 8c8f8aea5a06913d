package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// rttCands builds shard candidates with layers and capacities (GiB), and
// the RTT rows of a symmetric matrix ("a-b": µs) published by both ends.
func rttCands(layers int, caps map[string]int64, order string, matrix map[string]int64) []shardCand {
	var cs []shardCand
	for _, id := range strings.Split(order, ",") {
		cs = append(cs, shardCand{id: id, free: caps[id] << 30, layers: layers, rtt: map[string]int64{}})
	}
	for hop, us := range matrix {
		a, b, _ := strings.Cut(hop, "-")
		for i := range cs {
			switch cs[i].id {
			case a:
				cs[i].rtt[b] = us
			case b:
				cs[i].rtt[a] = us
			}
		}
	}
	return cs
}

// TestChooseStages: among the orders of candidates that hold the model,
// the planner takes the one with the least hop latency along the stages;
// unknown hops cost the stated default; ties keep the capacity order;
// pinned nodes are always among the stages.
func TestChooseStages(t *testing.T) {
	const gib = 1 << 30
	eight := map[string]int64{"a": 8, "b": 8, "c": 8, "d": 8, "e": 8}
	// d-c-e is the cheapest path over three of five nodes: 200 + 300.
	m5 := map[string]int64{
		"a-b": 5000, "a-c": 4000, "a-d": 5000, "a-e": 6000,
		"b-c": 5000, "b-d": 4000, "b-e": 7000,
		"c-d": 200, "c-e": 300, "d-e": 900,
	}
	for _, tc := range []struct {
		name   string
		stages int
		need   int64
		cands  []shardCand
		want   string
	}{
		{"no RTT known: capacity order", 3, 0, rttCands(6, eight, "a,b,c,d,e", nil), "6: a[0,2) b[2,4) c[4,6) hops 20000"},
		{"equal RTTs: capacity order", 2, 0, rttCands(6, eight, "a,b,c,d", map[string]int64{
			"a-b": 800, "a-c": 800, "a-d": 800, "b-c": 800, "b-d": 800, "c-d": 800}), "6: a[0,3) b[3,6) hops 800"},
		{"the cheapest pair", 2, 0, rttCands(6, eight, "a,b,c,d,e", m5), "6: c[0,3) d[3,6) hops 200"},
		{"the cheapest path, in its order", 3, 0, rttCands(6, eight, "a,b,c,d,e", m5), "6: d[0,2) c[2,4) e[4,6) hops 500"},
		{"four stages along the cheapest path", 4, 0, rttCands(8, eight, "a,b,c,d,e", m5), "8: b[0,2) d[2,4) c[4,6) e[6,8) hops 4500"},
		// A measured hop slower than the default loses to an unknown one.
		{"unknown counts as the default", 2, 0, rttCands(6, eight, "a,b,c,d", map[string]int64{"c-d": 20000, "a-c": 30000, "b-c": 30000, "a-d": 30000, "b-d": 30000}),
			"6: a[0,3) b[3,6) hops 10000"},
		{"a fast measured hop beats unknown", 2, 0, rttCands(6, eight, "a,b,c,d", map[string]int64{"c-d": 3000}), "6: c[0,3) d[3,6) hops 3000"},
		// c and d cannot hold half of 10 GiB: the cheapest pair that can.
		{"the cheapest pair that fits", 2, 10 * gib, rttCands(6, map[string]int64{"a": 8, "b": 8, "c": 4, "d": 4}, "a,b,c,d",
			map[string]int64{"c-d": 100, "a-c": 200, "a-b": 5000, "a-d": 900, "b-c": 900, "b-d": 900}), "6: a[0,4) c[4,6) hops 200"},
		{"nothing fits", 2, 100 * gib, rttCands(6, eight, "a,b,c,d", nil), ""},
		{"one candidate", 2, 0, rttCands(6, eight, "a", nil), "0: a[0,0) hops 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, hops := chooseStages("m", 0, tc.stages, tc.need, tc.cands, 10*time.Millisecond)
			got := ""
			if p != nil {
				got = fmt.Sprintf("%d: %s hops %d", p.NumLayers, stagesString(p), hops)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}

	// The search is bounded: 16 nodes in 16 stages keep the capacity
	// order when no RTT is known, and 12 nodes of distinct capacities that
	// hold the model in no order give up after maxPlanSplits splits.
	t.Run("bounded search", func(t *testing.T) {
		var ids, want []string
		caps := map[string]int64{}
		for i := range 16 {
			id := fmt.Sprintf("n%02d", i)
			ids, caps[id] = append(ids, id), int64(32-i)
			want = append(want, fmt.Sprintf("%s[%d,%d)", id, 2*i, 2*i+2))
		}
		p, hops := chooseStages("m", 0, 16, 0, rttCands(32, caps, strings.Join(ids, ","), nil), 10*time.Millisecond)
		if p == nil || stagesString(p) != strings.Join(want, " ") || hops != 150_000 {
			t.Fatalf("16 stages: %v, hops %d", p, hops)
		}
		if p, _ := chooseStages("m", 0, 6, 1000*gib, rttCands(24, caps, strings.Join(ids[:12], ","), nil), 10*time.Millisecond); p != nil {
			t.Fatalf("a plan for a model no order holds: %s", stagesString(p))
		}
	})

	t.Run("pinned nodes stay", func(t *testing.T) {
		cs := rttCands(6, eight, "e,a,b,c,d", m5)
		cs[0].pinned = true
		p, hops := chooseStages("m", 0, 2, 0, cs, 10*time.Millisecond)
		if got := fmt.Sprintf("%s hops %d", stagesString(p), hops); got != "e[0,3) c[3,6) hops 300" {
			t.Fatalf("got %q", got)
		}
	})
}

// TestHopRTT: a hop costs the mean of what both ends published, the one
// published when only one did, else the default.
func TestHopRTT(t *testing.T) {
	a := shardCand{id: "a", rtt: map[string]int64{"b": 1000, "c": 400}}
	b := shardCand{id: "b", rtt: map[string]int64{"a": 3000}}
	c := shardCand{id: "c"}
	d := shardCand{id: "d"}
	for _, tc := range []struct {
		x, y shardCand
		want int64
	}{{a, b, 2000}, {b, a, 2000}, {a, c, 400}, {c, a, 400}, {c, d, 7000}} {
		if got := hopRTT(tc.x, tc.y, 7*time.Millisecond); got != tc.want {
			t.Errorf("%s-%s: %d, want %d", tc.x.id, tc.y.id, got, tc.want)
		}
	}
}

// TestRTTTracker: probes are smoothed per peer; the published row changes
// only when an RTT moved past both thresholds (or a peer came or went),
// and at most once per interval.
func TestRTTTracker(t *testing.T) {
	tr := newRTTTracker(RTTConfig{PublishInterval: 10 * time.Second, PublishChange: 0.2, PublishMin: 200 * time.Microsecond})
	t0 := time.Unix(1000, 0)
	if row := tr.row(t0); row != nil {
		t.Fatalf("a row before any probe: %v", row)
	}
	tr.observe("b", 1000*time.Microsecond)
	tr.observe("c", 2000*time.Microsecond)
	// The first row goes out at once.
	if row := tr.row(t0); !maps.Equal(row, map[string]int64{"b": 1000, "c": 2000}) {
		t.Fatalf("first row %v", row)
	}
	// EWMA: 1000 + 0.25 × (2000 − 1000) = 1250: moved by 25% but only
	// 250 µs… past both thresholds, yet within the interval.
	tr.observe("b", 2000*time.Microsecond)
	if got := tr.current()["b"]; got != 1250*time.Microsecond {
		t.Fatalf("smoothed %v, want 1.25ms", got)
	}
	if row := tr.row(t0.Add(5 * time.Second)); row["b"] != 1000 {
		t.Fatalf("republished within the interval: %v", row)
	}
	if row := tr.row(t0.Add(10 * time.Second)); row["b"] != 1250 {
		t.Fatalf("not republished after the interval: %v", row)
	}
	t1 := t0.Add(10 * time.Second)
	for _, tc := range []struct {
		name  string
		probe time.Duration // one probe to c (published 2000 µs)
		moved bool
	}{
		// 2000 + 0.25 × (2600 − 2000) = 2150: 7.5%, 150 µs.
		{"small move", 2600 * time.Microsecond, false},
		// 2150 + 0.25 × (4150 − 2150) = 2650: 32.5%, 650 µs.
		{"large move", 4150 * time.Microsecond, true},
	} {
		tr.observe("c", tc.probe)
		t1 = t1.Add(time.Minute)
		row := tr.row(t1)
		if moved := row["c"] != 2000; moved != tc.moved {
			t.Fatalf("%s: row %v, moved %v, want %v", tc.name, row, moved, tc.moved)
		}
	}
	// A relative move under the absolute floor is jitter: 50 → 200 µs.
	small := newRTTTracker(RTTConfig{})
	small.observe("b", 50*time.Microsecond)
	small.row(t0)
	for range 20 {
		small.observe("b", 200*time.Microsecond)
	}
	if row := small.row(t0.Add(time.Hour)); row["b"] != 50 {
		t.Fatalf("a 150 µs move republished: %v", row)
	}
	// A peer gone is a change.
	tr.forget("b")
	if row := tr.row(t1.Add(time.Hour)); len(row) != 1 || row["b"] != 0 {
		t.Fatalf("row after forgetting b: %v", row)
	}
}

// TestMeasuredRTTReachesPlanner: in a 3-node in-process cluster the
// members' gossip probes are smoothed, published in the inventories they
// record (as the node's sync loop does, every round), replicated to the
// leader, read by the shard planner's candidates and shown in the status.
// Loopback RTTs say nothing of which plan is best, so the choice itself is
// TestChooseStages'.
func TestMeasuredRTTReachesPlanner(t *testing.T) {
	fast := func(c *Config) { c.RTT.PublishInterval = 50 * time.Millisecond }
	nodes := startCluster(t, 3, "", fast)
	leader := waitLeader(t, nodes, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inv := Inventory{ModelsOnDisk: []string{"m"}, Layers: map[string]int{"m": 6}, MemoryBudget: 8 << 30}
	for _, m := range nodes {
		go func() {
			for ctx.Err() == nil {
				_ = m.SetInventory(ctx, inv)
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	var cands []shardCand
	waitFor(t, 20*time.Second, "every candidate's RTT to both peers at the leader", func() bool {
		nodesAt := map[string]*pb.Node{}
		leader.fsm.Read(func(s *fsm.State) {
			for _, n := range s.Nodes() {
				nodesAt[n.Id] = n
			}
		})
		usable := usableIn(nodesAt, leader.peerSnapshot())
		cands = shardCandidates("m", PlacementSpec{}, nodesAt, usable)
		if len(cands) != 3 {
			return false
		}
		for _, c := range cands {
			if len(c.rtt) != 2 {
				return false
			}
		}
		return true
	})
	for _, c := range cands {
		peers := slices.Sorted(maps.Keys(c.rtt))
		for _, id := range peers {
			if id == c.id || c.rtt[id] <= 0 {
				t.Fatalf("%s's row %v", c.id, c.rtt)
			}
		}
	}
	// Each row came from the member's own probes, and the status
	// document (/admin/api/cluster, fusion cluster status) shows it.
	for _, m := range nodes {
		if got := m.RTTs(); len(got) == 0 {
			t.Fatalf("%s measured %v", m.ID(), got)
		}
	}
	for _, mi := range leader.Status().Members {
		if len(mi.RTTMicros) == 0 {
			t.Fatalf("status of %s: no rtt_us", mi.ID)
		}
	}
	// Every hop is now measured, not the default.
	for _, a := range cands {
		for _, b := range cands {
			if a.id != b.id && hopRTT(a, b, time.Hour) >= time.Hour.Microseconds() {
				t.Fatalf("hop %s-%s not measured", a.id, b.id)
			}
		}
	}
	p, hops := chooseStages("m", 0, 3, 0, cands, DefaultUnknownRTT)
	if p == nil || len(p.Stages) != 3 || hops <= 0 {
		t.Fatalf("plan %v, hops %d µs", p, hops)
	}
	t.Logf("RTT rows at the leader: %v; 3-stage plan %s, %d µs of hops", func() map[string]map[string]int64 {
		out := map[string]map[string]int64{}
		for _, c := range cands {
			out[c.id] = c.rtt
		}
		return out
	}(), stagesString(p), hops)
}

// TestPlannerOrdersStagesByRTT: the leader's planner reads the RTT rows
// replicated in the inventories and places a pipeline's stages on the
// pair, and in the order, with the least hop latency — not on the first
// nodes by capacity and id. The rows are written straight into the log
// (loopback RTTs are all alike), the way SetInventory records them.
func TestPlannerOrdersStagesByRTT(t *testing.T) {
	fast := func(c *Config) { c.PlanInterval = 100 * time.Millisecond }
	nodes := startCluster(t, 3, "", fast)
	ctx := context.Background()
	rows := map[string]map[string]int64{
		"n1": {"n2": 9000, "n3": 5000},
		"n2": {"n1": 9000, "n3": 300},
		"n3": {"n1": 5000, "n2": 300},
	}
	for _, m := range nodes {
		inv := Inventory{ModelsOnDisk: []string{"m"}, Layers: map[string]int{"m": 6}, MemoryBudget: 8 << 30}
		if err := m.SetInventory(ctx, inv); err != nil { // registered in the catalog
			t.Fatal(err)
		}
		inv.RTTMicros = rows[m.ID()]
		b, _ := json.Marshal(inv)
		if _, err := m.Apply(ctx, &pb.NodeSetInventory{Id: m.ID(), Inventory: b}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		stages int
		want   string
	}{
		{2, "n2[0,3) n3[3,6)"},         // the 0.3 ms pair, not n1 first
		{3, "n1[0,2) n3[2,4) n2[4,6)"}, // 5 + 0.3 ms, not n1-n2-n3's 9 + 0.3
	} {
		if err := nodes[0].SetPlacementSpec(ctx, "m", PlacementSpec{Replicas: 1, Stages: tc.stages}); err != nil {
			t.Fatal(err)
		}
		var got string
		waitFor(t, 10*time.Second, fmt.Sprintf("a %d-stage pipeline", tc.stages), func() bool {
			g := groupsOf(nodes[0], "m")[0]
			if g == nil || len(g.Stages) != tc.stages {
				return false
			}
			got = stagesString(g)
			return true
		})
		if got != tc.want {
			t.Fatalf("%d stages: %s, want %s", tc.stages, got, tc.want)
		}
	}
}
