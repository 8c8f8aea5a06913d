package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
)

// throughputResult builds a throughput profile's result JSON with points
// of (concurrency, decode tok/s).
func throughputResult(points ...[2]float64) []byte {
	var b []byte
	b = append(b, `{"model":"m","node":"x","generation_length":16,"points":[`...)
	for i, p := range points {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, fmt.Sprintf(`{"prompt_tokens":128,"concurrency":%d,"decode_tok_s":%g,"prefill_tok_s":500}`, int(p[0]), p[1])...)
	}
	return append(b, "]}"...)
}

func TestMeasuredSpeed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result []byte
		want   float64
		ok     bool
	}{
		{"concurrency 1", throughputResult([2]float64{1, 40}, [2]float64{4, 120}), 40, true},
		{"best at concurrency 1", throughputResult([2]float64{1, 40}, [2]float64{1, 55}, [2]float64{2, 90}), 55, true},
		{"lowest concurrency when 1 is missing", throughputResult([2]float64{4, 100}, [2]float64{2, 70}), 70, true},
		{"non-positive figures skipped", throughputResult([2]float64{1, 0}, [2]float64{2, 30}), 30, true},
		{"no points", throughputResult(), 0, false},
		{"only zero figures", throughputResult([2]float64{1, 0}), 0, false},
		{"not JSON", []byte("{"), 0, false},
		{"wrong shape", []byte(`{"points":"many"}`), 0, false},
		{"empty", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := measuredSpeed(tc.result)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("measuredSpeed = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	speeds := measuredSpeeds([]*pb.Profile{
		{Model: "m", Node: "a", Kind: ProfileThroughput, Result: throughputResult([2]float64{1, 12})},
		{Model: "m", Node: "b", Kind: "accuracy", Result: throughputResult([2]float64{1, 99})},
		{Model: "m", Node: "c", Kind: ProfileThroughput, Result: []byte("garbage")},
	})
	if len(speeds) != 1 || speeds["a"] != 12 {
		t.Fatalf("measuredSpeeds = %v, want only a: 12", speeds)
	}
}

// TestPickMeasuredSpeed: pins, loaded models and load still come first;
// then a measured faster node beats one with more free memory, and a
// node without a profile ranks after every measured one.
func TestPickMeasuredSpeed(t *testing.T) {
	type node struct {
		free   int64
		loaded bool
		load   int64
	}
	for _, tc := range []struct {
		name  string
		nodes map[string]node
		speed map[string]float64
		pin   []string
		want  string
	}{
		{"no profiles: most free memory",
			map[string]node{"a": {free: 30}, "b": {free: 10}}, nil, nil, "a"},
		{"faster measured beats more free memory",
			map[string]node{"a": {free: 30}, "b": {free: 10}}, map[string]float64{"a": 20, "b": 45}, nil, "b"},
		{"measured slow beats unknown with more memory",
			map[string]node{"a": {free: 30}, "b": {free: 10}}, map[string]float64{"b": 5}, nil, "b"},
		{"equal speed: free memory",
			map[string]node{"a": {free: 30}, "b": {free: 10}}, map[string]float64{"a": 20, "b": 20}, nil, "a"},
		{"pin before speed",
			map[string]node{"a": {free: 30}, "b": {free: 10}}, map[string]float64{"b": 90}, []string{"a"}, "a"},
		{"loaded before speed",
			map[string]node{"a": {free: 30, loaded: true}, "b": {free: 10}}, map[string]float64{"a": 1, "b": 90}, nil, "a"},
		{"less loaded before speed",
			map[string]node{"a": {free: 30, load: 0}, "b": {free: 10, load: 3}}, map[string]float64{"a": 1, "b": 90}, nil, "a"},
		{"profile of a node without the model ignored",
			map[string]node{"a": {free: 30}}, map[string]float64{"z": 90}, nil, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := map[string]*pb.Node{}
			loads := map[string]int64{}
			for id, n := range tc.nodes {
				inv := Inventory{ModelsOnDisk: []string{"m"}, MemoryFree: n.free}
				if n.loaded {
					inv.ModelsLoaded = []string{"m"}
				}
				raw, err := json.Marshal(inv)
				if err != nil {
					t.Fatal(err)
				}
				nodes[id] = &pb.Node{Id: id, Inventory: raw}
				loads[id] = n.load
			}
			all := func(string) bool { return true }
			got := (&Member{}).pick("m", PlacementSpec{Replicas: 1, Pin: tc.pin}, nodes, nil, all,
				func(id string) int64 { return loads[id] }, tc.speed)
			if got != tc.want {
				t.Fatalf("pick = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPlannerUsesProfiles: in a 3-node cluster alike but for free
// memory, a model without profiles is placed on the node with the most
// free memory, and one whose throughput profiles say another node
// decodes it faster is placed there.
func TestPlannerUsesProfiles(t *testing.T) {
	fast := func(c *Config) { c.PlanInterval = 100 * time.Millisecond }
	nodes := []*Member{testNode(t, "n1", t.TempDir(), nil, 3, "", fast)}
	seed := []string{nodes[0].GossipAddr()}
	for _, id := range []string{"n2", "n3"} {
		nodes = append(nodes, testNode(t, id, t.TempDir(), seed, 3, "", fast))
	}
	waitLeader(t, nodes, 10*time.Second)
	ctx := context.Background()
	free := map[string]int64{"n1": 20, "n2": 30, "n3": 10}
	for _, m := range nodes {
		if err := m.SetInventory(ctx, Inventory{ModelsOnDisk: []string{"plain", "measured"}, MemoryFree: free[m.ID()]}); err != nil {
			t.Fatal(err)
		}
	}
	// n3 (least memory) is measured fastest, n1 slow; n2 (most memory)
	// is unknown, so it comes last.
	for id, tokS := range map[string]float64{"n1": 8, "n3": 60} {
		_, err := nodes[1].Apply(ctx, &pb.ProfilePut{Profile: &pb.Profile{Model: "measured", Node: id, Kind: ProfileThroughput,
			JobId: "j-" + id, UpdatedUnixNano: 1, Result: throughputResult([2]float64{1, tokS})}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[0].SetPlacementSpec(ctx, "plain", PlacementSpec{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].SetPlacementSpec(ctx, "measured", PlacementSpec{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "plain on the most free memory, measured by speed then unknown", func() bool {
		p, g := groupsOf(nodes[0], "plain"), groupsOf(nodes[0], "measured")
		return len(p) == 1 && p[0] != nil && p[0].Stages[0].Node == "n2" &&
			len(g) == 3 && g[0] != nil && g[1] != nil && g[2] != nil &&
			g[0].Stages[0].Node == "n3" && g[1].Stages[0].Node == "n1" && g[2].Stages[0].Node == "n2"
	})
}
