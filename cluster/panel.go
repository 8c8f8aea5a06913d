package cluster

import (
	"context"
	"fmt"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// missReadTimeout bounds the linearizable read a panel session lookup
// makes when the hash is not (yet) in the local state.
const missReadTimeout = 2 * time.Second

// PanelSessions are the admin panel's sign-in sessions in the replicated
// state (dashboard.SessionStore): a sign-in on one node is good on every
// node, a sign-out on any node ends it on all of them, and the session
// cap counts the whole cluster. Only the SHA-256 of a cookie's secret is
// stored.
type PanelSessions struct{ m *Member }

// PanelSessions returns the member's panel session store.
func (m *Member) PanelSessions() *PanelSessions { return &PanelSessions{m: m} }

// Create stores a session through the leader (at most max live sessions
// in the cluster, 0: no cap) and returns once it is applied here, so the
// browser's next request to this node finds it.
func (p *PanelSessions) Create(ctx context.Context, hash [32]byte, now, expires time.Time, max int) error {
	r, err := p.m.Apply(ctx, &pb.PanelSessionPut{
		Session:     &pb.PanelSession{Hash: hash[:], CreatedUnixNano: now.UnixNano(), ExpiresUnixNano: expires.UnixNano()},
		NowUnixNano: now.UnixNano(), MaxSessions: uint32(max),
	})
	if err != nil {
		return fmt.Errorf("cluster: panel sign-in: %w", err)
	}
	return p.m.fsm.WaitApplied(ctx, r.Index)
}

// Lookup returns the expiry of the session of hash if it is live at now.
// A hash this node does not hold yet may be a sign-in on another node
// that has not reached it: one linearizable read (bounded by
// missReadTimeout) settles it before the answer is no.
func (p *PanelSessions) Lookup(ctx context.Context, hash [32]byte, now time.Time) (time.Time, bool) {
	if exp, ok := p.read(hash, now); ok {
		return exp, true
	}
	ctx, cancel := context.WithTimeout(ctx, missReadTimeout)
	defer cancel()
	if p.m.ConsistentRead(ctx) != nil {
		return time.Time{}, false
	}
	return p.read(hash, now)
}

func (p *PanelSessions) read(hash [32]byte, now time.Time) (exp time.Time, ok bool) {
	var ps *pb.PanelSession
	p.m.fsm.Read(func(s *fsm.State) { ps, ok = s.PanelSession(hash[:], now.UnixNano()) })
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, ps.ExpiresUnixNano), true
}

// End ends the session of hash on every node and returns once it is
// applied here.
func (p *PanelSessions) End(ctx context.Context, hash [32]byte) error {
	r, err := p.m.Apply(ctx, &pb.PanelSessionEnd{Hash: hash[:]})
	if err != nil {
		return fmt.Errorf("cluster: panel sign-out: %w", err)
	}
	return p.m.fsm.WaitApplied(ctx, r.Index)
}
