package cluster

import (
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// Stats are the member's consensus figures, for /metrics and for callers
// that bound staleness (e.g. refuse a sensitive local read when the last
// contact with the leader is too old).
type Stats struct {
	State          string        `json:"state"` // Leader, Follower, Candidate, Shutdown
	Leader         string        `json:"leader"`
	Term           uint64        `json:"term"`
	LastLogIndex   uint64        `json:"last_log_index"`
	CommitIndex    uint64        `json:"commit_index"`
	AppliedIndex   uint64        `json:"applied_index"` // of the FSM
	LastContact    time.Duration `json:"last_contact_ns"`
	Voters         int           `json:"voters"`
	Servers        int           `json:"servers"`
	Members        int           `json:"members"` // gossip, alive
	ForcedNewConns int64         `json:"forced_new_conns"`
	BoltFreePages  int           `json:"bolt_free_pages"`
}

// Stats returns the current figures. LastContact is 0 on the leader and
// the time since the leader was last heard from elsewhere.
func (m *Member) Stats() Stats {
	rs := m.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(rs[k], 10, 64); return v }
	st := Stats{
		State: m.raft.State().String(), Leader: m.Leader(), Term: num("term"),
		LastLogIndex: num("last_log_index"), CommitIndex: num("commit_index"),
		AppliedIndex: m.fsm.AppliedIndex(), ForcedNewConns: m.pool.forced.Load(),
		BoltFreePages: m.stores.Stats().FreePageN,
	}
	if m.raft.State() != raft.Leader {
		if lc := m.raft.LastContact(); !lc.IsZero() {
			st.LastContact = time.Since(lc)
		} else {
			st.LastContact = -1 // never
		}
	}
	if f := m.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			st.Servers++
			if s.Suffrage == raft.Voter {
				st.Voters++
			}
		}
	}
	for _, p := range m.peerSnapshot() {
		if p.status == StatusAlive {
			st.Members++
		}
	}
	return st
}
