package main

import (
	"bytes"
	"strings"
	"testing"

	"fusion/cluster"
)

// TestPrintClusterStatusPipelines: fusion cluster status prints each
// replica group with its state, and a sharded model's stages with their
// nodes, layer ranges and states.
func TestPrintClusterStatusPipelines(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    cluster.PlacementInfo
		want string
	}{
		{"unsharded", cluster.PlacementInfo{Model: "demo", Generation: 7, Stages: []cluster.StageInfo{{Node: "a", State: "ready"}}},
			"demo   0        7           -      a ready"},
		{"pipeline", cluster.PlacementInfo{Model: "deep", Generation: 16, NumLayers: 6, State: "broken", Stages: []cluster.StageInfo{
			{Node: "a", Layers: [2]uint32{0, 3}, State: "ready"}, {Node: "b", Layers: [2]uint32{3, 6}, State: "ready"}}},
			"deep   0        16          broken  a[0,3) ready, b[3,6) ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printClusterStatus(&b, cluster.StatusDoc{Self: "a", Leader: "a", Placements: []cluster.PlacementInfo{tc.p}})
			if !containsFields(b.String(), tc.want) {
				t.Errorf("output:\n%s\nwant a line %q", b.String(), tc.want)
			}
		})
	}
}

// containsFields reports whether some line of out has want's fields.
func containsFields(out, want string) bool {
	w := strings.Join(strings.Fields(want), " ")
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == w {
			return true
		}
	}
	return false
}
