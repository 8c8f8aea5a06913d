package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

func TestPlanVoters(t *testing.T) {
	v := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter} }
	nv := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Nonvoter} }
	tests := []struct {
		name    string
		servers []raft.Server
		healthy string // ids alive in gossip
		dead    string // ids failed past the grace
		want    int
		leader  string
		op      voterOp
		id      string
	}{
		{"steady, spare stays a non-voter", []raft.Server{v("a"), v("b"), v("c"), nv("d")}, "abcd", "", 3, "a", voterNone, ""},
		{"dead voter, spare promoted first", []raft.Server{v("a"), v("b"), v("c"), nv("d")}, "abd", "c", 3, "a", voterPromote, "d"},
		{"failed voter within the grace, spare promoted", []raft.Server{v("a"), v("b"), v("c"), nv("d")}, "abd", "", 3, "a", voterPromote, "d"},
		{"spare promoted, dead voter removed", []raft.Server{v("a"), v("b"), v("c"), v("d")}, "abd", "c", 3, "a", voterRemove, "c"},
		{"dead voter, no spare: kept (floor 3)", []raft.Server{v("a"), v("b"), v("c")}, "ab", "c", 3, "a", voterNone, ""},
		{"two dead voters of three: no quorum, kept", []raft.Server{v("a"), v("b"), v("c")}, "a", "bc", 3, "a", voterNone, ""},
		{"five voters, two dead: pruned to four", []raft.Server{v("a"), v("b"), v("c"), v("d"), v("e")}, "abc", "de", 5, "a", voterRemove, "d"},
		{"four voters, one dead: pruned to three", []raft.Server{v("a"), v("b"), v("c"), v("d")}, "abc", "d", 5, "a", voterRemove, "d"},
		{"three healthy voters of five wanted: floor", []raft.Server{v("a"), v("b"), v("c")}, "abc", "", 5, "a", voterNone, ""},
		{"five voters, three dead: no quorum, kept", []raft.Server{v("a"), v("b"), v("c"), v("d"), v("e")}, "ab", "cde", 5, "a", voterNone, ""},
		{"surplus voter demoted, never the leader", []raft.Server{v("a"), v("b"), v("c"), v("d")}, "abcd", "", 3, "d", voterDemote, "c"},
		{"dead non-voter removed", []raft.Server{v("a"), v("b"), v("c"), nv("d")}, "abc", "d", 3, "a", voterRemove, "d"},
		{"one voter wanted, lone node", []raft.Server{v("a")}, "a", "", 1, "a", voterNone, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := func(set string) func(raft.ServerID) bool {
				return func(id raft.ServerID) bool {
					for _, c := range set {
						if string(c) == string(id) {
							return true
						}
					}
					return false
				}
			}
			ch := planVoters(tc.servers, in(tc.healthy), in(tc.dead), tc.want, raft.ServerID(tc.leader))
			if ch.op != tc.op || string(ch.server.ID) != tc.id {
				t.Fatalf("planVoters = %q %q, want %q %q", ch.op, ch.server.ID, tc.op, tc.id)
			}
		})
	}
}

func voterIDs(t *testing.T, m *Member) (voters, nonVoters []string) {
	t.Helper()
	for _, s := range servers(t, m) {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		} else {
			nonVoters = append(nonVoters, string(s.ID))
		}
	}
	return voters, nonVoters
}

// writer commits settings through random live nodes until stopped and
// records what was acknowledged, what failed and the longest wait
// between two acknowledgements.
type writer struct {
	mu      sync.Mutex
	nodes   []*Member
	acked   []string
	failed  []error
	maxGap  time.Duration
	last    time.Time
	stop    chan struct{}
	stopped chan struct{}
}

func startWriter(nodes []*Member) *writer {
	w := &writer{nodes: nodes, last: time.Now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			m := w.nodes[rand.IntN(len(w.nodes))]
			key := fmt.Sprintf("w%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := put(ctx, m, key, key)
			cancel()
			w.mu.Lock()
			if err != nil {
				w.failed = append(w.failed, fmt.Errorf("%s via %s: %w", key, m.ID(), err))
			} else {
				w.acked = append(w.acked, key)
				w.maxGap = max(w.maxGap, time.Since(w.last))
				w.last = time.Now()
			}
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) finish(t *testing.T, maxGap time.Duration) []string {
	t.Helper()
	close(w.stop)
	<-w.stopped
	if len(w.failed) > 0 {
		t.Fatalf("%d of %d writes failed, first: %v", len(w.failed), len(w.failed)+len(w.acked), w.failed[0])
	}
	if w.maxGap > maxGap {
		t.Fatalf("writes stalled: %v between two commits (bound %v)", w.maxGap, maxGap)
	}
	t.Logf("%d writes acknowledged, longest gap between commits %v", len(w.acked), w.maxGap)
	return w.acked
}

func checkAcked(t *testing.T, nodes []*Member, acked []string) {
	t.Helper()
	for _, m := range nodes {
		m.fsm.Read(func(s *fsm.State) {
			for _, k := range acked {
				if v, ok := s.Setting(k); !ok || string(v.Value) != k {
					t.Errorf("%s lost acknowledged write %s", m.ID(), k)
				}
			}
		})
	}
}

// TestDeadVoterReplaced: 3 voters and a non-voter; a follower voter is
// killed. The leader promotes the non-voter at once (the dead voter only
// counts as failed) and removes the dead voter once DeadServerGrace has
// passed, back to 3 voters; writes through random live nodes keep
// committing all along.
func TestDeadVoterReplaced(t *testing.T) {
	const grace = time.Second
	opt := func(c *Config) { c.DeadServerGrace = grace }
	nodes := startCluster(t, 3, "", opt)
	leader := waitLeader(t, nodes, 5*time.Second)
	n4 := testNode(t, "n4", t.TempDir(), []string{nodes[0].GossipAddr()}, 0, "", opt)
	waitFor(t, 10*time.Second, "n4 in raft as a non-voter", func() bool {
		_, non := voterIDs(t, leader)
		return sameIDs(non, []string{"n4"})
	})
	var victim *Member
	var live []*Member
	for _, m := range nodes {
		if m != leader && victim == nil {
			victim = m
		} else {
			live = append(live, m)
		}
	}
	live = append(live, n4)

	w := startWriter(live)
	waitFor(t, 5*time.Second, "writes flowing", func() bool { return w.count() >= 10 })
	before := w.count()
	victim.Close()

	promoted := waitFor(t, 10*time.Second, "n4 promoted", func() bool {
		v, _ := voterIDs(t, leader)
		for _, id := range v {
			if id == "n4" {
				return true
			}
		}
		return false
	})
	removed := waitFor(t, 15*time.Second, "the dead voter removed", func() bool {
		for _, s := range servers(t, leader) {
			if string(s.ID) == victim.ID() {
				return false
			}
		}
		return true
	}) + promoted
	t.Logf("n4 promoted %v after the kill, %s removed %v after it (grace %v)", promoted, victim.ID(), removed, grace)
	// Removal waits for gossip to declare the death (≈ 0.65 s with
	// TestTiming) plus the grace, and happens on the next reconcile
	// round (at most 1 s): ≈ 1.7–2.7 s; 8 s leaves room for a loaded
	// machine.
	if removed < grace || removed > 8*time.Second {
		t.Fatalf("dead voter removed %v after the kill, want between the grace %v and 8 s", removed, grace)
	}
	// A few more rounds: the configuration stays at the three live voters.
	time.Sleep(2 * time.Second)
	want := []string{}
	for _, m := range nodes {
		if m != victim {
			want = append(want, m.ID())
		}
	}
	want = append(want, "n4")
	for _, m := range live {
		waitFor(t, 5*time.Second, m.ID()+" sees the three live voters", func() bool {
			v, non := voterIDs(t, m)
			return sameIDs(v, want) && len(non) == 0
		})
	}
	if w.count()-before < 20 {
		t.Fatalf("only %d writes committed after the kill", w.count()-before)
	}
	acked := w.finish(t, 3*time.Second)
	waitSameState(t, live)
	checkAcked(t, live, acked)
}

// TestDeadVoterKeptWithoutSpare: 3 voters, no spare. One dies: past the
// grace it is kept (removing it would leave 2 voters, below minVoters),
// and writes commit with the two live voters. A second dies: the last
// node loses quorum, and its configuration still names the 3 voters.
func TestDeadVoterKeptWithoutSpare(t *testing.T) {
	const grace = 300 * time.Millisecond
	nodes := startCluster(t, 3, "", func(c *Config) { c.DeadServerGrace = grace })
	leader := waitLeader(t, nodes, 5*time.Second)
	var followers []*Member
	for _, m := range nodes {
		if m != leader {
			followers = append(followers, m)
		}
	}
	all := []string{"n1", "n2", "n3"}
	ctx := context.Background()

	followers[0].Close()
	waitFor(t, 10*time.Second, "the dead follower marked failed", func() bool {
		return nodeStatusOf(leader, followers[0].ID()) == pb.NodeStatus_NODE_STATUS_FAILED
	})
	// Past the grace by several reconcile rounds (one a second).
	time.Sleep(grace + 3*time.Second)
	if v, _ := voterIDs(t, leader); !sameIDs(v, all) {
		t.Fatalf("voters after one death with no spare: %v, want %v", v, all)
	}
	for i := range 10 {
		if _, err := put(ctx, followers[1], fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatalf("write with two of three voters: %v", err)
		}
	}

	followers[1].Close()
	lost := waitFor(t, 5*time.Second, "the last node stepping down", func() bool { return !leader.IsLeader() })
	t.Logf("leader without quorum stepped down %v after the second kill", lost)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := put(wctx, leader, "lost", "v"); err == nil {
		t.Fatal("a write committed on one of three voters")
	}
	if v, _ := voterIDs(t, leader); !sameIDs(v, all) {
		t.Fatalf("voters after losing quorum: %v, want %v", v, all)
	}
}
