package fsm

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// TestProfiles: a profile is keyed by model, node and kind (a new
// measurement replaces the old), deletes take a model's profiles (all,
// or one node's and kind's), the table keeps at most MaxProfiles by
// evicting the one updated longest ago, and a snapshot carries them.
func TestProfiles(t *testing.T) {
	h := newHarness(t)
	prof := func(model, node, kind string, at int64) *pb.ProfilePut {
		return &pb.ProfilePut{Profile: &pb.Profile{Model: model, Node: node, Kind: kind, JobId: "j", UpdatedUnixNano: at, Result: []byte(`{"x":1}`)}}
	}
	for _, tc := range []struct {
		name string
		cmd  proto.Message
		want error
	}{
		{"no model", prof("", "a", "throughput", 1), ErrInvalid},
		{"no node", prof("m", "", "throughput", 1), ErrInvalid},
		{"no kind", prof("m", "a", "", 1), ErrInvalid},
		{"nil", &pb.ProfilePut{}, ErrInvalid},
		{"over the bound", &pb.ProfilePut{Profile: &pb.Profile{Model: "m", Node: "a", Kind: "k", Result: make([]byte, MaxProfileBytes)}}, ErrInvalid},
		{"delete without model", &pb.ProfileDelete{}, ErrInvalid},
		{"delete unknown", &pb.ProfileDelete{Model: "m"}, ErrNotFound},
	} {
		if r := h.apply(tc.cmd); !errors.Is(r.Err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, r.Err, tc.want)
		}
	}
	h.ok(prof("m", "a", "throughput", 1))
	h.ok(prof("m", "b", "throughput", 2))
	h.ok(prof("m", "a", "accuracy", 3))
	h.ok(prof("n", "a", "throughput", 4))
	r := h.ok(prof("m", "a", "throughput", 5))
	if len(r.Changes) != 1 || r.Changes[0].Kind != Updated || r.Changes[0].Table != TableProfiles {
		t.Errorf("re-measuring: %+v", r.Changes)
	}
	if got := h.s.Profiles("m"); len(got) != 3 || got[0].Kind != "accuracy" || got[1].UpdatedUnixNano != 5 || got[2].Node != "b" {
		t.Errorf("profiles of m: %v", got)
	}
	if got := h.s.Profiles(""); len(got) != 4 {
		t.Errorf("every profile: %v", got)
	}
	if r := h.ok(&pb.ProfileDelete{Model: "m", Node: "a", Kind: "accuracy"}); r.Value != 1 {
		t.Errorf("deleted %d", r.Value)
	}
	if r := h.ok(&pb.ProfileDelete{Model: "m"}); r.Value != 2 {
		t.Errorf("deleted %d", r.Value)
	}
	for i := len(h.s.profiles); i < MaxProfiles; i++ {
		h.ok(prof(fmt.Sprintf("q%04d", i), "c", "throughput", int64(100+i)))
	}
	r = h.ok(prof("new", "c", "throughput", 9000))
	if r.Changes[0].Kind != Deleted || r.Changes[0].Key != profileKey("n", "a", "throughput") {
		t.Errorf("the oldest profile was not evicted: %+v", r.Changes)
	}
	s2 := restore(t, encodeState(t, h.s), 16)
	if got, want := len(s2.Profiles("")), MaxProfiles; got != want {
		t.Errorf("after a snapshot: %d profiles, want %d", got, want)
	}
	if got := s2.Profiles("new"); len(got) != 1 || string(got[0].Result) != `{"x":1}` {
		t.Errorf("after a snapshot: %v", got)
	}
}
