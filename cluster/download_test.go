package cluster

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	pb "fusion/cluster/clusterpb"
)

// TestDownloadNodes: the nodes a placement takes before the model's files
// are anywhere: pinned first, then nodes that have the model, then the
// most capacity; the fewest stages whose equal shares fit when the spec
// asks for none; replicas on distinct nodes; not-usable nodes skipped;
// too few nodes and too little memory refused, naming the nodes.
func TestDownloadNodes(t *testing.T) {
	const gib = 1 << 30
	node := func(budget int64, has bool) *pb.Node {
		inv := Inventory{MemoryBudget: budget, MemoryFree: 64 * gib}
		if has {
			inv.ModelsOnDisk = []string{"m"}
		}
		b, _ := json.Marshal(inv)
		return &pb.Node{Inventory: b}
	}
	nodes := map[string]*pb.Node{
		"a": node(16*gib, false),
		"b": node(48*gib, false),
		"c": node(32*gib, true),
		"d": node(24*gib, false),
		"e": node(8*gib, false),
	}
	down := "d"
	usable := func(id string) bool { return id != down }
	for _, tc := range []struct {
		name   string
		spec   PlacementSpec
		need   int64
		stages int
		nodes  []string
		have   []string
		err    error
	}{
		{"whole, has it first", PlacementSpec{Replicas: 1}, 10 * gib, 1, []string{"c"}, []string{"c"}, nil},
		{"whole, too big for c", PlacementSpec{Replicas: 1}, 40 * gib, 1, []string{"b"}, nil, nil},
		{"two replicas", PlacementSpec{Replicas: 2}, 20 * gib, 1, []string{"c", "b"}, []string{"c"}, nil},
		{"pinned first", PlacementSpec{Replicas: 1, Pin: []string{"a"}}, 10 * gib, 1, []string{"a"}, nil, nil},
		{"a pin too small is passed over", PlacementSpec{Replicas: 1, Pin: []string{"e"}}, 10 * gib, 1, []string{"c"}, []string{"c"}, nil},
		{"fewest stages", PlacementSpec{Replicas: 1}, 60 * gib, 2, []string{"c", "b"}, []string{"c"}, nil},
		{"three stages", PlacementSpec{Replicas: 1}, 90 * gib, 3, []string{"c", "b", "a"}, []string{"c"}, nil},
		{"stages asked", PlacementSpec{Replicas: 1, Stages: 3}, gib, 3, []string{"c", "b", "a"}, []string{"c"}, nil},
		{"need unknown", PlacementSpec{Replicas: 1}, 0, 1, []string{"c"}, []string{"c"}, nil},
		{"replicas of stages", PlacementSpec{Replicas: 2, Stages: 2}, gib, 2, []string{"c", "b", "a", "e"}, []string{"c"}, nil},
		{"too few nodes", PlacementSpec{Replicas: 5}, gib, 0, nil, nil, ErrTooFewNodes},
		{"too few for the stages", PlacementSpec{Replicas: 1, Stages: 5}, gib, 0, nil, nil, ErrTooFewNodes},
		{"too big for all", PlacementSpec{Replicas: 1}, 200 * gib, 0, nil, nil, ErrInsufficientMemory},
		{"stages asked, shares too big", PlacementSpec{Replicas: 1, Stages: 2}, 100 * gib, 0, nil, nil, ErrInsufficientMemory},
		{"invalid", PlacementSpec{Replicas: 1, Stages: MaxStages + 1}, gib, 0, nil, nil, ErrInvalidCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := downloadNodes("m", tc.spec, tc.need, nodes, usable)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Stages != tc.stages || !slices.Equal(got.Nodes, tc.nodes) || !slices.Equal(got.Have, tc.have) {
				t.Fatalf("got %+v, want %d stages on %v having %v", got, tc.stages, tc.nodes, tc.have)
			}
		})
	}
}
