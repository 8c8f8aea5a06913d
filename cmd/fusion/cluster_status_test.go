package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

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

// TestPrintClusterStatusRTT: each member's line ends with the round trips
// it published to its peers, by peer id.
func TestPrintClusterStatusRTT(t *testing.T) {
	var b bytes.Buffer
	printClusterStatus(&b, cluster.StatusDoc{Self: "a", Leader: "a", Members: []cluster.MemberInfo{
		{ID: "a", Status: "alive", Leader: true, HTTP: "h", GRPC: "g", RTTMicros: map[string]int64{"c": 10604, "b": 608}},
		{ID: "b", Status: "alive", Voter: true, HTTP: "h", GRPC: "g"},
	}})
	for _, want := range []string{"a alive leader false h g b 610µs, c 10.6ms", "b alive voter false h g -"} {
		if !containsFields(b.String(), want) {
			t.Errorf("output:\n%s\nwant a line %q", b.String(), want)
		}
	}
}

// TestClusterRTTSettings: the RTT publication thresholds and the
// planner's cost of an unmeasured hop are flags, with checked values.
func TestClusterRTTSettings(t *testing.T) {
	none := func(string) string { return "" }
	s, err := resolveServe(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.cfg.Cluster.RTT; r.PublishInterval != cluster.DefaultRTTPublishInterval || r.PublishChange != cluster.DefaultRTTPublishChange ||
		r.PublishMin != cluster.DefaultRTTPublishMin || r.Unknown != cluster.DefaultUnknownRTT {
		t.Fatalf("defaults: %+v", r)
	}
	s, err = resolveServe([]string{"--cluster-rtt-publish-interval", "30s", "--cluster-rtt-publish-change", "50",
		"--cluster-rtt-publish-min", "1ms", "--cluster-rtt-unknown", "2ms"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.cfg.Cluster.RTT; r.PublishInterval != 30*time.Second || r.PublishChange != 0.5 || r.PublishMin != time.Millisecond || r.Unknown != 2*time.Millisecond {
		t.Fatalf("set: %+v", r)
	}
	for _, args := range [][]string{
		{"--cluster-rtt-publish-interval", "0s"},
		{"--cluster-rtt-publish-change", "0"},
		{"--cluster-rtt-publish-min", "-1ms"},
		{"--cluster-rtt-unknown", "soon"},
	} {
		if _, err := resolveServe(args, none, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
