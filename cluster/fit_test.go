package cluster

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	pb "fusion/cluster/clusterpb"
)

// TestFit: a model some node's capacity holds is placed whole; one none
// holds needs the fewest nodes, largest first, whose capacities add up to
// it with each stage's share within its node's capacity; one they cannot
// hold together is refused, naming the need and the total.
func TestFit(t *testing.T) {
	const mib = 1 << 20
	cand := func(id string, capacity int64) shardCand {
		return shardCand{id: id, free: capacity, layers: 6}
	}
	for _, tc := range []struct {
		name   string
		need   int64
		cands  []shardCand
		stages int
	}{
		{"fits one node", 100 * mib, []shardCand{cand("a", 200*mib), cand("b", 50*mib)}, 1},
		{"need unknown", 0, []shardCand{cand("a", 1)}, 1},
		{"two of three", 100 * mib, []shardCand{cand("a", 60*mib), cand("b", 60*mib), cand("c", 60*mib)}, 2},
		{"three of three", 100 * mib, []shardCand{cand("a", 40*mib), cand("b", 40*mib), cand("c", 40*mib)}, 3},
		// 90+11+11 ≥ 100 in bytes, but a layer is 16.7 MiB.
		{"shares checked", 100 * mib, []shardCand{cand("a", 90*mib), cand("b", 11*mib), cand("c", 11*mib)}, 0},
		{"largest first", 100 * mib, []shardCand{cand("a", 80*mib), cand("b", 40*mib), cand("c", 20*mib)}, 2},
		// 80+30 hold 100 in bytes, but b's two layers of six are 33 MiB.
		{"whole layers", 100 * mib, []shardCand{cand("a", 80*mib), cand("b", 30*mib), cand("c", 20*mib)}, 3},
		{"too big for all", 100 * mib, []shardCand{cand("a", 30*mib), cand("b", 30*mib), cand("c", 30*mib)}, 0},
		{"no node", 100 * mib, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, total := fit(tc.need, tc.cands)
			var want int64
			for _, c := range tc.cands {
				want += c.free
			}
			if got != tc.stages || total != want {
				t.Fatalf("fit = %d stages of %d bytes, want %d of %d", got, total, tc.stages, want)
			}
		})
	}

	// From inventories: the budget is the capacity, the largest reported
	// need counts, and the refusal names both figures.
	inv := func(budget int64, need int64) *pb.Node {
		b, _ := json.Marshal(Inventory{ModelsOnDisk: []string{"m"}, MemoryBudget: budget, MemoryFree: 64 << 30,
			Layers: map[string]int{"m": 6}, ModelBytes: map[string]int64{"m": need}})
		return &pb.Node{Inventory: b}
	}
	nodes := map[string]*pb.Node{"a": inv(30*mib, 100*mib), "b": inv(30*mib, 90*mib), "c": inv(30*mib, 0)}
	all := func(string) bool { return true }
	_, err := fitError("m", nodes, all)
	if !errors.Is(err, ErrInsufficientMemory) || !strings.Contains(err.Error(), "needs 104857600 bytes") ||
		!strings.Contains(err.Error(), "(a, b, c) total 94371840") {
		t.Fatalf("got %v, want ErrInsufficientMemory naming 104857600 needed and 94371840 in all", err)
	}
	for _, id := range []string{"a", "b", "c"} {
		nodes[id] = inv(40*mib, 100*mib)
	}
	if k, err := fitError("m", nodes, all); k != 3 || err != nil {
		t.Fatalf("with budgets of 40 MiB: %d stages, %v; want 3", k, err)
	}
}
