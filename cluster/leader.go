package cluster

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// bootstrapLoop forms the first cluster. A node with raft state never
// bootstraps; a lone node without seeds or expect bootstraps itself; with
// --bootstrap-expect N it waits for N alive members announcing the same N,
// checks that none of them already belongs to a cluster, and bootstraps
// the sorted member set (every node computes the same configuration).
func (m *Member) bootstrapLoop() {
	if m.hadState {
		return
	}
	expect := m.cfg.BootstrapExpect
	if expect <= 1 {
		if len(m.cfg.Join) == 0 {
			m.bootstrap([]Meta{m.selfMeta()})
		}
		return // with seeds: the leader adds this node
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	warned := map[string]bool{}
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.bootstrapCh:
		case <-tick.C:
		}
		if m.inCluster() {
			return
		}
		var ready []Meta
		mismatch := false
		for _, p := range m.peerSnapshot() {
			// Members without an expectation are joiners: the leader adds them.
			if p.status != StatusAlive || p.meta.BootstrapExpect == 0 {
				continue
			}
			if p.meta.BootstrapExpect != expect {
				if !warned[p.meta.ID] {
					m.log.Error("bootstrap: a member expects a different cluster size; not bootstrapping",
						"member", p.meta.ID, "its_expect", p.meta.BootstrapExpect, "expect", expect)
					warned[p.meta.ID] = true
				}
				mismatch = true
				continue
			}
			ready = append(ready, p.meta)
		}
		if mismatch || len(ready) < expect {
			continue
		}
		joined, ok := m.othersHaveNoCluster(ready)
		if joined {
			return
		}
		if ok {
			m.bootstrap(ready)
			return
		}
	}
}

func (m *Member) inCluster() bool {
	if m.Leader() != "" {
		return true
	}
	f := m.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// othersHaveNoCluster asks every other member for its raft state.
// joined: one of them already has a cluster (wait to be added); ok: all
// answered and none has one.
func (m *Member) othersHaveNoCluster(members []Meta) (joined, ok bool) {
	for _, p := range members {
		if p.ID == m.cfg.NodeID {
			continue
		}
		conn, err := m.pool.get(p.GRPC, false)
		if err != nil {
			return false, false
		}
		ctx, cancel := context.WithTimeout(m.ctx, time.Second)
		st, err := pb.NewClusterClient(conn).Status(ctx, &pb.StatusRequest{})
		cancel()
		if err != nil {
			return false, false
		}
		if st.HasState || st.LeaderId != "" {
			return true, false
		}
	}
	return false, true
}

func (m *Member) bootstrap(members []Meta) {
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	var servers []raft.Server
	for _, p := range members {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Raft)})
	}
	err := m.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		m.log.Error("bootstrap failed", "err", err)
		return
	}
	m.log.Info("bootstrapped the cluster", "voters", len(servers))
}

// monitorLeadership runs the leader loop while this node leads.
func (m *Member) monitorLeadership() {
	var stop func()
	stopLeader := func() {
		if stop != nil {
			stop()
			stop = nil
			m.readyTerm.Store(0)
		}
	}
	for {
		select {
		case <-m.ctx.Done():
			stopLeader()
			return
		case leader := <-m.notifyCh:
			if leader && stop == nil {
				stop = m.startLeaderLoop()
			} else if !leader {
				stopLeader()
			}
		}
	}
}

func (m *Member) startLeaderLoop() (stop func()) {
	ctx, cancel := context.WithCancel(m.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.leaderLoop(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// leaderLoop: barrier (apply everything earlier terms committed), then
// reconcile gossip into the catalog and raft configuration, on every
// membership change and periodically, and sweep expired sessions.
func (m *Member) leaderLoop(ctx context.Context) {
	m.log.Info("leading")
	for {
		term := m.raft.CurrentTerm()
		if err := m.raft.Barrier(m.cfg.ApplyTimeout).Error(); err == nil {
			if m.raft.CurrentTerm() == term {
				// Reads are served locally only in the term whose barrier
				// this node has applied.
				m.readyTerm.Store(term)
				break
			}
		} else if ctx.Err() != nil {
			return
		} else {
			m.log.Warn("leader barrier", "err", err)
		}
		if ctx.Err() != nil {
			return
		}
	}
	m.reconcile(ctx)
	recon := time.NewTicker(m.cfg.ReconcileInterval)
	defer recon.Stop()
	reap := time.NewTicker(m.cfg.ReapInterval)
	defer reap.Stop()
	retry := time.NewTicker(time.Second) // repairs steps that failed
	defer retry.Stop()
	planT := time.NewTicker(m.cfg.PlanInterval)
	defer planT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.reconcileCh:
			m.reconcile(ctx)
		case <-recon.C:
			m.reconcile(ctx)
		case <-retry.C:
			m.reconcile(ctx)
		case <-reap.C:
			m.reap(ctx)
		case <-planT.C:
			m.plan(ctx)
		}
	}
}

// reconcile makes the catalog and the raft configuration follow gossip.
func (m *Member) reconcile(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	peers := m.peerSnapshot()
	self := m.selfMeta()
	if p, ok := peers[self.ID]; !ok || p.status != StatusAlive {
		peers[self.ID] = peer{meta: self, status: StatusAlive, since: time.Now()}
	}
	var catalog map[string]*pb.Node
	m.fsm.Read(func(s *fsm.State) {
		catalog = map[string]*pb.Node{}
		for _, n := range s.Nodes() {
			catalog[n.Id] = n
		}
	})
	for _, id := range sortedIDs(peers) {
		p := peers[id]
		n := catalog[id]
		switch p.status {
		case StatusAlive:
			want := &pb.Node{Id: id, HttpAddr: p.meta.HTTP, GrpcAddr: p.meta.GRPC, RaftAddr: p.meta.Raft,
				GossipAddr: p.gossip, Role: p.meta.Role, Version: p.meta.Version, Draining: p.meta.Draining,
				Status: pb.NodeStatus_NODE_STATUS_ALIVE}
			if n != nil {
				want.Inventory = n.Inventory
			}
			if n == nil || !sameNode(n, want) {
				m.leaderWrite(ctx, &pb.NodeUpsert{Node: want})
			}
			m.ensureServer(p.meta)
		case StatusFailed:
			if n != nil && n.Status == pb.NodeStatus_NODE_STATUS_ALIVE {
				m.leaderWrite(ctx, &pb.NodeSetStatus{Id: id, Status: pb.NodeStatus_NODE_STATUS_FAILED})
			}
		case StatusLeft:
			if n != nil {
				m.leaderWrite(ctx, &pb.NodeDeregister{Id: id})
			}
			if id != self.ID {
				m.removeServer(raft.ServerID(id))
			}
		}
	}
	// Catalog entries gossip does not know (e.g. died before this leader
	// started) are failed, once gossip has had time to report everyone.
	settle := m.cfg.Timing.GossipSettle
	if settle <= 0 {
		settle = 5 * time.Second
	}
	for id, n := range catalog {
		if time.Since(m.startedAt) < settle {
			break
		}
		if _, ok := peers[id]; !ok && n.Status == pb.NodeStatus_NODE_STATUS_ALIVE {
			m.leaderWrite(ctx, &pb.NodeSetStatus{Id: id, Status: pb.NodeStatus_NODE_STATUS_FAILED})
		}
	}
	m.reconcileVoters(peers)
}

func sameNode(a, b *pb.Node) bool {
	return a.HttpAddr == b.HttpAddr && a.GrpcAddr == b.GrpcAddr && a.RaftAddr == b.RaftAddr &&
		a.GossipAddr == b.GossipAddr && a.Role == b.Role && a.Version == b.Version &&
		a.Draining == b.Draining && a.Status == b.Status
}

func (m *Member) leaderWrite(ctx context.Context, cmd proto.Message) {
	if _, err := m.Apply(ctx, cmd); err != nil && !errors.Is(err, fsm.ErrNotFound) {
		m.log.Warn("leader write", "command", cmd.ProtoReflect().Descriptor().Name(), "err", err)
	}
}

// ensureServer adds an alive member to the raft configuration as a
// non-voter, or updates its address (same id, new address keeps its
// suffrage). Another server holding the same address is removed first.
func (m *Member) ensureServer(p Meta) {
	if p.Raft == "" {
		return
	}
	f := m.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if string(s.Address) == p.Raft && string(s.ID) != p.ID {
			m.log.Info("raft: removing a server that held this address", "old_id", s.ID, "new_id", p.ID)
			m.removeServer(s.ID)
		}
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != p.ID {
			continue
		}
		if string(s.Address) == p.Raft {
			return
		}
		m.log.Info("raft: server address changed", "id", p.ID, "from", s.Address, "to", p.Raft)
		var err error
		if s.Suffrage == raft.Voter {
			err = m.raft.AddVoter(s.ID, raft.ServerAddress(p.Raft), 0, m.cfg.ApplyTimeout).Error()
		} else {
			err = m.raft.AddNonvoter(s.ID, raft.ServerAddress(p.Raft), 0, m.cfg.ApplyTimeout).Error()
		}
		if err != nil {
			m.log.Warn("raft: update address", "id", p.ID, "err", err)
		}
		return
	}
	if err := m.raft.AddNonvoter(raft.ServerID(p.ID), raft.ServerAddress(p.Raft), 0, m.cfg.ApplyTimeout).Error(); err != nil {
		m.log.Warn("raft: add non-voter", "id", p.ID, "err", err)
		return
	}
	m.log.Info("raft: added non-voter", "id", p.ID, "addr", p.Raft)
}

func (m *Member) removeServer(id raft.ServerID) {
	f := m.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			if err := m.raft.RemoveServer(id, 0, m.cfg.ApplyTimeout).Error(); err != nil {
				m.log.Warn("raft: remove server", "id", id, "err", err)
			} else {
				m.log.Info("raft: removed server", "id", id)
			}
			return
		}
	}
}

// reconcileVoters applies one voter change per round (planVoters).
func (m *Member) reconcileVoters(peers map[string]peer) {
	f := m.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	healthy := func(id raft.ServerID) bool { p, ok := peers[string(id)]; return ok && p.status == StatusAlive }
	dead := func(id raft.ServerID) bool {
		p, ok := peers[string(id)]
		return ok && p.status == StatusFailed && time.Since(p.since) > m.cfg.DeadServerGrace
	}
	ch := planVoters(f.Configuration().Servers, healthy, dead, m.cfg.Voters, raft.ServerID(m.cfg.NodeID))
	var err error
	switch ch.op {
	case voterNone:
		return
	case voterPromote:
		err = m.raft.AddVoter(ch.server.ID, ch.server.Address, 0, m.cfg.ApplyTimeout).Error()
	case voterDemote:
		err = m.raft.DemoteVoter(ch.server.ID, 0, m.cfg.ApplyTimeout).Error()
	case voterRemove:
		err = m.raft.RemoveServer(ch.server.ID, 0, m.cfg.ApplyTimeout).Error()
	}
	if err != nil {
		m.log.Warn("raft: voter change", "op", ch.op, "id", ch.server.ID, "err", err)
		return
	}
	m.log.Info("raft: voter change", "op", ch.op, "id", ch.server.ID)
}

type voterOp string

const (
	voterNone    voterOp = ""
	voterPromote voterOp = "promote"
	voterDemote  voterOp = "demote"
	voterRemove  voterOp = "remove"
)

type voterChange struct {
	op     voterOp
	server raft.Server
}

// minVoters is the floor dead-voter clean-up never goes below (autopilot's
// MinQuorum): a 3-voter cluster with a dead voter and no spare keeps it,
// so that if it comes back while another voter is down the two still form
// a quorum; pruned to 2, the cluster would wait for that other voter.
const minVoters = 3

// planVoters decides the one change of a round, in this order:
//   - promote the first healthy non-voter while healthy voters are fewer
//     than min(want, healthy servers);
//   - remove a voter dead past the grace, only if the healthy voters
//     still form a quorum of the smaller configuration and it keeps at
//     least min(want, minVoters) voters;
//   - demote a surplus healthy voter (never the leader);
//   - remove a non-voter dead past the grace.
//
// It is pure: the raft configuration and gossip's view in, a change out.
func planVoters(servers []raft.Server, healthy, dead func(raft.ServerID) bool, want int, leader raft.ServerID) voterChange {
	servers = append([]raft.Server(nil), servers...)
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	var voters, healthyVoters, healthyNon, deadVoters, deadNon []raft.Server
	nHealthy := 0
	for _, s := range servers {
		h := healthy(s.ID)
		if h {
			nHealthy++
		}
		switch {
		case s.Suffrage == raft.Voter:
			voters = append(voters, s)
			if h {
				healthyVoters = append(healthyVoters, s)
			} else if dead(s.ID) {
				deadVoters = append(deadVoters, s)
			}
		case h:
			healthyNon = append(healthyNon, s)
		case dead(s.ID):
			deadNon = append(deadNon, s)
		}
	}
	target := min(want, nHealthy)
	floor := min(want, minVoters)
	switch {
	case len(healthyVoters) < target && len(healthyNon) > 0:
		return voterChange{voterPromote, healthyNon[0]}
	case len(deadVoters) > 0 && len(voters)-1 >= floor && len(healthyVoters) >= (len(voters)-1)/2+1:
		return voterChange{voterRemove, deadVoters[0]}
	case len(healthyVoters) > want:
		for i := len(healthyVoters) - 1; i >= 0; i-- {
			if s := healthyVoters[i]; s.ID != leader {
				return voterChange{voterDemote, s}
			}
		}
	}
	if len(deadNon) > 0 {
		return voterChange{voterRemove, deadNon[0]}
	}
	return voterChange{}
}

// reap deletes expired sessions through the log (leader clock).
func (m *Member) reap(ctx context.Context) {
	var next int64
	m.fsm.Read(func(s *fsm.State) { next = s.NextExpiry() })
	now := time.Now().UnixNano()
	if next == 0 || next > now {
		return
	}
	m.leaderWrite(ctx, &pb.SessionReap{NowUnixNano: now})
}
