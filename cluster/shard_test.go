package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	pb "fusion/cluster/clusterpb"
)

// TestPlanStages: layer ranges follow free memory, every stage gets at
// least one layer, the fewest nodes asked for are used, and impossible
// plans are nil.
func TestPlanStages(t *testing.T) {
	const gib = 1 << 30
	cand := func(id string, free int64, layers int) shardCand {
		return shardCand{id: id, free: free, layers: layers}
	}
	headed := func(head float64, cs ...shardCand) []shardCand {
		for i := range cs {
			cs[i].head = head
		}
		return cs
	}
	for _, tc := range []struct {
		name   string
		stages int
		need   int64
		cands  []shardCand
		want   string // "" for nil
	}{
		{"equal cost, 2 stages", 2, 0, []shardCand{cand("a", 8*gib, 6), cand("b", 8*gib, 6), cand("c", 8*gib, 6)}, "6: a[0,3) b[3,6)"},
		{"equal cost, 3 stages", 3, 0, []shardCand{cand("a", 8*gib, 6), cand("b", 8*gib, 6), cand("c", 8*gib, 6)}, "6: a[0,2) b[2,4) c[4,6)"},
		// The Qwen3-0.6B shape: the head reads as many weights as 9.9 layers.
		{"head on the last stage", 2, 0, headed(9.9, cand("a", 8*gib, 12), cand("b", 8*gib, 12)), "12: a[0,11) b[11,12)"},
		{"head, 28 layers in 3", 3, 0, headed(9.9, cand("a", 8*gib, 28), cand("b", 8*gib, 28), cand("c", 8*gib, 28)), "28: a[0,13) b[13,25) c[25,28)"},
		{"a head heavier than the layers", 3, 0, headed(20, cand("a", 8*gib, 4), cand("b", 8*gib, 4), cand("c", 8*gib, 4)), "4: a[0,2) b[2,3) c[3,4)"},
		// Capacity no longer sets the ranges, only bounds them.
		{"uneven memory, room for both", 2, 32 * gib, []shardCand{cand("a", 24*gib, 32), cand("b", 16*gib, 32)}, "32: a[0,16) b[16,32)"},
		// 1 GiB a layer: b holds 10, a takes the rest.
		{"uneven memory bounds a stage", 2, 32 * gib, []shardCand{cand("a", 24*gib, 32), cand("b", 10*gib, 32)}, "32: a[0,22) b[22,32)"},
		// 12 layers + a 4-layer head in 16 GiB: b's head alone is 4 GiB.
		{"uneven memory with a head", 2, 16 * gib, headed(4, cand("a", 100*gib, 12), cand("b", 6*gib, 12)), "12: a[0,10) b[10,12)"},
		{"a stage cannot hold its share", 2, 16 * gib, headed(4, cand("a", 100*gib, 12), cand("b", 4*gib, 12)), ""},
		{"unknown memory is equal", 2, 0, []shardCand{cand("a", 0, 5), cand("b", 0, 5)}, "5: a[0,3) b[3,5)"},
		{"known need, no capacity", 2, gib, []shardCand{cand("a", 8*gib, 5), cand("b", 0, 5)}, ""},
		// Nodes that report no capacity at all: split by cost, as before
		// capacities bounded the split.
		{"known need, no node reports capacity", 2, gib, []shardCand{cand("a", 0, 5), cand("b", 0, 5)}, "5: a[0,3) b[3,5)"},
		{"known need, none reports capacity, a head", 2, gib, headed(9.9, cand("a", 0, 12), cand("b", 0, 12)), "12: a[0,11) b[11,12)"},
		{"one layer at least", 3, 0, []shardCand{cand("a", 100*gib, 4), cand("b", 1, 4), cand("c", 1, 4)}, "4: a[0,2) b[2,3) c[3,4)"},
		{"fewer nodes than stages", 3, 0, []shardCand{cand("a", gib, 6), cand("b", gib, 6)}, "6: a[0,3) b[3,6)"},
		{"more stages than layers", 3, 0, []shardCand{cand("a", gib, 2), cand("b", gib, 2), cand("c", gib, 2)}, "2: a[0,1) b[1,2)"},
		{"one node: unsharded", 2, 0, []shardCand{cand("a", gib, 6)}, "0: a[0,0)"},
		{"no node", 2, 0, nil, ""},
		{"layer counts disagree", 2, 0, []shardCand{cand("a", gib, 6), cand("b", gib, 8)}, ""},
		// Gemma 4 E2B: its KV-shared layers stay with layers 13 and 14.
		{"max cut", 2, 0, []shardCand{{id: "a", free: 8 * gib, layers: 35, maxCut: 13}, {id: "b", free: 8 * gib, layers: 35, maxCut: 13}}, "35: a[0,13) b[13,35)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planStages("m", 0, tc.stages, tc.need, tc.cands)
			got := ""
			if p != nil {
				got = fmt.Sprintf("%d: %s", p.NumLayers, stagesString(p))
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if p != nil && p.NumLayers > 0 {
				var next uint32
				for _, st := range p.Stages {
					if st.LayerStart != next || st.LayerEnd <= st.LayerStart {
						t.Fatalf("ranges do not tile: %s", stagesString(p))
					}
					next = st.LayerEnd
				}
				if next != p.NumLayers {
					t.Fatalf("ranges end at %d of %d", next, p.NumLayers)
				}
			}
		})
	}
}

// TestPipelineState: a group is broken as soon as a stage's node is not
// usable, failed if a stage failed, ready when every stage is.
func TestPipelineState(t *testing.T) {
	ready, loading, failed := pb.StageState_STAGE_STATE_READY, pb.StageState_STAGE_STATE_ASSIGNED, pb.StageState_STAGE_STATE_FAILED
	live := func(id string) bool { return id != "dead" }
	for _, tc := range []struct {
		stages []*pb.Stage
		want   string
	}{
		{[]*pb.Stage{{Node: "a", State: ready}, {Node: "b", State: ready}}, "ready"},
		{[]*pb.Stage{{Node: "a", State: ready}, {Node: "b", State: loading}}, "loading"},
		{[]*pb.Stage{{Node: "a", State: loading}, {Node: "b", State: failed}}, "failed"},
		{[]*pb.Stage{{Node: "a", State: ready}, {Node: "dead", State: ready}}, "broken"},
	} {
		if got := pipelineState(&pb.Placement{NumLayers: 2, Stages: tc.stages}, live); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.stages, got, tc.want)
		}
	}
}

// TestPlanShardedWarnsOnce: a sharded group the planner cannot place is
// warned about on the first failure (not only when a placed group breaks),
// once until it is placed again.
func TestPlanShardedWarnsOnce(t *testing.T) {
	var logs strings.Builder
	m := &Member{log: slog.New(slog.NewTextHandler(&logs, nil))}
	spec := PlacementSpec{Replicas: 1, Stages: 2}
	none := func(string) bool { return false } // no usable node: nothing fits
	for range 3 {
		m.planSharded(context.Background(), "m", spec, nil, nil, none)
	}
	if n := strings.Count(logs.String(), "does not fit"); n != 1 {
		t.Fatalf("%d warnings over 3 passes, want 1:\n%s", n, logs.String())
	}
	m.unplaced.placed("m", 0)
	m.planSharded(context.Background(), "m", spec, nil, map[uint32]*pb.Placement{0: {Model: "m", NumLayers: 4,
		Stages: []*pb.Stage{{Node: "a"}, {Node: "b"}}}}, none)
	if n := strings.Count(logs.String(), "no longer fits"); n != 1 {
		t.Fatalf("a broken group's failure after a placement: %d warnings, want 1:\n%s", n, logs.String())
	}
}
