package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// partitions is a symmetric cut of raft and gRPC traffic between groups
// of nodes (gossip still flows: this tests consensus, not detection).
type partitions struct {
	mu    sync.Mutex
	group map[string]int // address → group; 0 = everyone can reach it
	own   map[string]int // node id → its group
}

func (p *partitions) hook(id string) func(string) bool {
	return func(addr string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		g, ok := p.group[addr]
		mine := p.own[id]
		return ok && g != 0 && mine != 0 && g != mine
	}
}

func (p *partitions) cut(groups ...[]*Member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, g := range groups {
		for _, m := range g {
			p.own[m.ID()] = i + 1
			p.group[m.RaftAddr()] = i + 1
			p.group[m.GRPCAddr()] = i + 1
		}
	}
}

func (p *partitions) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.group)
	clear(p.own)
}

// TestPartitionedLeader: the leader is cut off from the two followers.
// The majority elects a leader and commits; a write proposed on the
// isolated old leader never commits (it is gone after healing); after
// healing every node has the same state with every acknowledged write.
func TestPartitionedLeader(t *testing.T) {
	p := &partitions{group: map[string]int{}, own: map[string]int{}}
	nodes := []*Member{testNode(t, "n1", t.TempDir(), nil, 3, "", func(c *Config) { c.blocked = p.hook("n1") })}
	seed := []string{nodes[0].GossipAddr()}
	for _, id := range []string{"n2", "n3"} {
		nodes = append(nodes, testNode(t, id, t.TempDir(), seed, 3, "", func(c *Config) { c.blocked = p.hook(id) }))
	}
	old := waitLeader(t, nodes, 10*time.Second)
	ctx := context.Background()
	var acked []string
	for i := range 10 {
		k := fmt.Sprintf("before%d", i)
		if _, err := put(ctx, nodes[i%3], k, k); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, k)
	}
	var majority []*Member
	for _, m := range nodes {
		if m != old {
			majority = append(majority, m)
		}
	}
	p.cut([]*Member{old}, majority)
	cutAt := time.Now()

	// The isolated leader cannot commit.
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err := put(wctx, old, "minority", "x")
	cancel()
	if err == nil {
		t.Fatal("a write on the isolated leader was acknowledged")
	}
	newLeader := waitLeader(t, majority, 3*time.Second)
	t.Logf("majority leader %s %v after the cut; minority write: %v", newLeader.ID(), time.Since(cutAt), err)
	for i := range 10 {
		k := fmt.Sprintf("during%d", i)
		if _, err := put(ctx, majority[i%2], k, k); err != nil {
			t.Fatalf("majority write: %v", err)
		}
		acked = append(acked, k)
	}
	if old.IsLeader() {
		t.Fatal("the isolated node still believes it leads")
	}

	p.heal()
	waitSameState(t, nodes)
	for _, m := range nodes {
		m.fsm.Read(func(s *fsm.State) {
			for _, k := range acked {
				if _, ok := s.Setting(k); !ok {
					t.Errorf("%s lost acknowledged write %s", m.ID(), k)
				}
			}
			if _, ok := s.Setting("minority"); ok {
				t.Errorf("%s has the write proposed in the minority", m.ID())
			}
		})
	}
	if _, err := old.Apply(ctx, &pb.SettingPut{Key: "after", Value: []byte("x")}); err != nil {
		t.Fatalf("write through the healed node: %v", err)
	}
}

// TestLaggingFollowerGetsSnapshot: a follower cut off while the leader
// snapshots and compacts its log catches up by InstallSnapshot (our
// Persist/Restore over the real transport) and then by the log.
func TestLaggingFollowerGetsSnapshot(t *testing.T) {
	p := &partitions{group: map[string]int{}, own: map[string]int{}}
	small := func(id string) func(*Config) {
		return func(c *Config) {
			c.blocked = p.hook(id)
			c.Timing.SnapshotThreshold = 16
			c.Timing.TrailingLogs = 4
			c.Timing.SnapshotInterval = 100 * time.Millisecond
		}
	}
	nodes := []*Member{testNode(t, "n1", t.TempDir(), nil, 3, "", small("n1"))}
	seed := []string{nodes[0].GossipAddr()}
	for _, id := range []string{"n2", "n3"} {
		nodes = append(nodes, testNode(t, id, t.TempDir(), seed, 3, "", small(id)))
	}
	leader := waitLeader(t, nodes, 10*time.Second)
	var lagging *Member
	var rest []*Member
	for _, m := range nodes {
		if m != leader && lagging == nil {
			lagging = m
		} else {
			rest = append(rest, m)
		}
	}
	ctx := context.Background()
	if _, err := put(ctx, leader, "first", "x"); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, nodes)
	behind := lagging.fsm.AppliedIndex()
	var resets atomic.Int64
	cancel := lagging.fsm.Subscribe(func(cs []fsm.Change) {
		for _, c := range cs {
			if c.Kind == fsm.Reset {
				resets.Add(1)
			}
		}
	})
	defer cancel()

	p.cut([]*Member{lagging}, rest)
	for i := range 100 {
		if _, err := put(ctx, rest[i%2], fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the leader to compact past the lagging follower", func() bool {
		first, err := leader.stores.Log.FirstIndex()
		return err == nil && first > behind+1
	})
	p.heal()
	waitSameState(t, nodes)
	if resets.Load() == 0 {
		t.Fatal("the lagging follower caught up without a snapshot")
	}
	if _, err := put(ctx, lagging, "after", "x"); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, nodes)
}

// TestRecoverFromPeersFile: two of three voters are lost for good; the
// operator writes peers.json naming the survivor alone, which restarts as
// a one-voter cluster with its data and takes writes.
func TestRecoverFromPeersFile(t *testing.T) {
	nodes := startCluster(t, 3, "")
	ctx := context.Background()
	for i := range 5 {
		if _, err := put(ctx, nodes[i%3], fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	waitSameState(t, nodes)
	survivor := nodes[0]
	dir, raftAddr := survivor.cfg.DataDir, survivor.RaftAddr()
	for _, m := range nodes {
		m.Close()
	}
	peers := fmt.Sprintf(`[{"id": %q, "address": %q, "non_voter": false}]`, survivor.ID(), raftAddr)
	if err := os.WriteFile(filepath.Join(dir, "raft", PeersFile), []byte(peers), 0o600); err != nil {
		t.Fatal(err)
	}
	again := testNode(t, survivor.ID(), dir, nil, 3, "", func(c *Config) { c.RaftListen = raftAddr })
	waitLeader(t, []*Member{again}, 10*time.Second)
	again.fsm.Read(func(s *fsm.State) {
		for i := range 5 {
			if _, ok := s.Setting(fmt.Sprintf("k%d", i)); !ok {
				t.Errorf("k%d lost in recovery", i)
			}
		}
	})
	if _, err := put(ctx, again, "after", "x"); err != nil {
		t.Fatal(err)
	}
	if s := servers(t, again); len(s) != 1 {
		t.Fatalf("servers after recovery: %v", s)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft", PeersFile+".applied")); err != nil {
		t.Fatal(err)
	}
}
