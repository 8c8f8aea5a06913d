package fsm

import (
	"crypto/sha256"
	"sort"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// The admin panel's sign-in sessions (dashboard), replicated so that a
// browser signed in on one node is signed in on all of them and a
// sign-out anywhere ends it everywhere. Only the SHA-256 of a cookie's
// secret is stored.

func (s *State) panelSessionPut(c *pb.PanelSessionPut) Result {
	ps := c.GetSession()
	if len(ps.GetHash()) != sha256.Size {
		return fail(CodeInvalid, 0, "panel session hash of %d bytes, want %d", len(ps.GetHash()), sha256.Size)
	}
	if ps.ExpiresUnixNano <= c.NowUnixNano {
		return fail(CodeInvalid, 0, "panel session expires at %d, not after now (%d)", ps.ExpiresUnixNano, c.NowUnixNano)
	}
	for k, o := range s.panel {
		if o.ExpiresUnixNano <= c.NowUnixNano {
			delete(s.panel, k)
		}
	}
	key := string(ps.Hash)
	delete(s.panel, key) // a repeated hash replaces its session
	if c.MaxSessions > 0 {
		// End the sessions that expire first (ties: the smaller hash),
		// the same choice on every replica.
		keys := sortedKeys(s.panel)
		sort.SliceStable(keys, func(i, j int) bool { return s.panel[keys[i]].ExpiresUnixNano < s.panel[keys[j]].ExpiresUnixNano })
		for i := 0; len(s.panel) >= int(c.MaxSessions); i++ {
			delete(s.panel, keys[i])
		}
	}
	s.panel[key] = proto.Clone(ps).(*pb.PanelSession)
	return Result{}
}

func (s *State) panelSessionEnd(c *pb.PanelSessionEnd) Result {
	delete(s.panel, string(c.Hash))
	return Result{}
}

// PanelSession returns the panel session of a cookie hash if it is live
// at now (unix nanoseconds).
func (s *State) PanelSession(hash []byte, now int64) (*pb.PanelSession, bool) {
	ps, ok := s.panel[string(hash)]
	if !ok || ps.ExpiresUnixNano <= now {
		return nil, false
	}
	return proto.Clone(ps).(*pb.PanelSession), true
}

// PanelSessionCount is the number of stored panel sessions (expired ones
// included until the next sign-in drops them).
func (s *State) PanelSessionCount() int { return len(s.panel) }
