package fsm

import (
	"sort"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// Limits of the profiles table, the same on every replica.
const (
	// MaxProfileBytes bounds one profile (a benchmark's figures).
	MaxProfileBytes = 16 << 10
	// MaxProfiles bounds the profiles kept: a new one over the cap evicts
	// the one updated longest ago.
	MaxProfiles = 2000
)

// profileKey is a profile's key: model, node and kind, NUL-separated.
func profileKey(model, node, kind string) string { return model + "\x00" + node + "\x00" + kind }

func (s *State) profilePut(c *pb.ProfilePut) Result {
	p := c.GetProfile()
	switch {
	case p == nil || p.Model == "" || p.Node == "" || p.Kind == "":
		return fail(CodeInvalid, 0, "a profile needs model, node and kind")
	case proto.Size(p) > MaxProfileBytes:
		return fail(CodeInvalid, 0, "profile of %q: %d bytes is over the limit of %d", p.Model, proto.Size(p), MaxProfileBytes)
	}
	k := profileKey(p.Model, p.Node, p.Kind)
	if _, ok := s.profiles[k]; ok {
		s.profiles[k] = proto.Clone(p).(*pb.Profile)
		return Result{Changes: []Change{{Table: TableProfiles, Kind: Updated, Key: k}}}
	}
	var changes []Change
	if len(s.profiles) >= MaxProfiles {
		victim := ""
		for _, key := range sortedKeys(s.profiles) {
			if victim == "" || s.profiles[key].UpdatedUnixNano < s.profiles[victim].UpdatedUnixNano {
				victim = key
			}
		}
		delete(s.profiles, victim)
		changes = append(changes, Change{Table: TableProfiles, Kind: Deleted, Key: victim, Reason: "evicted"})
	}
	s.profiles[k] = proto.Clone(p).(*pb.Profile)
	return Result{Changes: append(changes, Change{Table: TableProfiles, Kind: Created, Key: k})}
}

func (s *State) profileDelete(c *pb.ProfileDelete) Result {
	if c.Model == "" {
		return fail(CodeInvalid, 0, "model is required")
	}
	var changes []Change
	for _, k := range sortedKeys(s.profiles) {
		p := s.profiles[k]
		if p.Model != c.Model || (c.Node != "" && p.Node != c.Node) || (c.Kind != "" && p.Kind != c.Kind) {
			continue
		}
		delete(s.profiles, k)
		changes = append(changes, Change{Table: TableProfiles, Kind: Deleted, Key: k, Reason: "deleted"})
	}
	if len(changes) == 0 {
		return fail(CodeNotFound, 0, "no profile of %q", c.Model)
	}
	return Result{Value: uint64(len(changes)), Changes: changes}
}

// Profiles returns the profiles of model ("" every model), by model,
// node and kind.
func (s *State) Profiles(model string) []*pb.Profile {
	var out []*pb.Profile
	for _, k := range sortedKeys(s.profiles) {
		if p := s.profiles[k]; model == "" || p.Model == model {
			out = append(out, proto.Clone(p).(*pb.Profile))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}
