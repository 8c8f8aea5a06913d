package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// testNode starts a member on loopback with fast timings.
func testNode(t *testing.T, id, dir string, join []string, expect int, secret string, opts ...func(*Config)) *Member {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("FUSION_CLUSTER_DEBUG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg := Config{
		NodeID: id, DataDir: dir,
		GossipListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
		HTTPAdvertise: "http://" + id + ".test", Join: join, BootstrapExpect: expect, Secret: secret,
		Version: "test", ReapInterval: 50 * time.Millisecond, ReconcileInterval: time.Second,
		DeadServerGrace: time.Hour, LeaveDelay: 300 * time.Millisecond, Timing: TestTiming(), Logger: logger,
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startCluster starts n nodes with --bootstrap-expect n, all at once.
func startCluster(t *testing.T, n int, secret string, opts ...func(*Config)) []*Member {
	t.Helper()
	nodes := []*Member{testNode(t, "n1", t.TempDir(), nil, n, secret, opts...)}
	seed := []string{nodes[0].GossipAddr()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 2; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := testNode(t, fmt.Sprintf("n%d", i), t.TempDir(), seed, n, secret, opts...)
			mu.Lock()
			nodes = append(nodes, m)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID() < nodes[j].ID() })
	waitLeader(t, nodes, 10*time.Second)
	return nodes
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// waitLeader waits until every node agrees on one leader among them.
func waitLeader(t *testing.T, nodes []*Member, timeout time.Duration) *Member {
	t.Helper()
	var leader *Member
	waitFor(t, timeout, "one agreed leader", func() bool {
		leader = nil
		id := ""
		for _, m := range nodes {
			l := m.Leader()
			if l == "" || id != "" && l != id {
				return false
			}
			id = l
			if m.IsLeader() {
				if leader != nil {
					return false
				}
				leader = m
			}
		}
		return leader != nil && leader.ready()
	})
	return leader
}

func servers(t *testing.T, m *Member) []raft.Server {
	t.Helper()
	f := m.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	s := append([]raft.Server(nil), f.Configuration().Servers...)
	sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID })
	return s
}

func stateBytes(m *Member) (uint64, []byte) {
	var buf bytes.Buffer
	var idx uint64
	m.fsm.Read(func(s *fsm.State) {
		idx = s.AppliedIndex()
		s.WriteTo(&buf)
	})
	return idx, buf.Bytes()
}

// waitSameState waits until all nodes hold byte-identical state.
func waitSameState(t *testing.T, nodes []*Member) {
	t.Helper()
	waitFor(t, 10*time.Second, "identical FSM state", func() bool {
		_, want := stateBytes(nodes[0])
		for _, m := range nodes[1:] {
			if _, got := stateBytes(m); !bytes.Equal(got, want) {
				return false
			}
		}
		return true
	})
}

func nodeStatusOf(m *Member, id string) pb.NodeStatus {
	var st pb.NodeStatus
	m.fsm.Read(func(s *fsm.State) {
		if n, ok := s.Node(id); ok {
			st = n.Status
		}
	})
	return st
}

func put(ctx context.Context, m *Member, key, val string) (fsm.Result, error) {
	return m.Apply(ctx, &pb.SettingPut{Key: key, Value: []byte(val)})
}

func TestLoneNodeBootstrapsItself(t *testing.T) {
	m := testNode(t, "solo", t.TempDir(), nil, 0, "")
	waitLeader(t, []*Member{m}, 5*time.Second)
	ctx := context.Background()
	r, err := put(ctx, m, "k", "v")
	if err != nil || r.Value == 0 {
		t.Fatalf("apply: %+v %v", r, err)
	}
	if err := m.ConsistentRead(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "self in the catalog", func() bool { return nodeStatusOf(m, "solo") == pb.NodeStatus_NODE_STATUS_ALIVE })
	if s := servers(t, m); len(s) != 1 || s[0].Suffrage != raft.Voter {
		t.Fatalf("servers %v", s)
	}
}

// TestFormJoinLeave: three nodes started at once with --bootstrap-expect 3
// form exactly one cluster of three voters; a fourth joins as a non-voter;
// it leaves gracefully and is removed from raft and the catalog. Runs
// with a cluster secret: a caller without it is refused.
func TestFormJoinLeave(t *testing.T) {
	const secret = "s3cret"
	nodes := startCluster(t, 3, secret)
	leader := waitLeader(t, nodes, 5*time.Second)
	// A node that found the others already bootstrapped gets the
	// configuration by replication, a moment after it learns the leader.
	waitFor(t, 5*time.Second, "every node sees the same three voters", func() bool {
		for _, m := range nodes {
			s := servers(t, m)
			if len(s) != 3 {
				return false
			}
			for i, sv := range s {
				if sv.Suffrage != raft.Voter || string(sv.ID) != nodes[i].ID() || string(sv.Address) != nodes[i].RaftAddr() {
					return false
				}
			}
		}
		return true
	})
	t.Logf("leader %s", leader.ID())

	ctx := context.Background()
	n4 := testNode(t, "n4", t.TempDir(), []string{nodes[1].GossipAddr()}, 0, secret)
	all := append(nodes, n4)
	waitFor(t, 10*time.Second, "n4 in raft as a non-voter", func() bool {
		for _, s := range servers(t, leader) {
			if s.ID == "n4" {
				return s.Suffrage == raft.Nonvoter
			}
		}
		return false
	})
	// A write through the non-voter is forwarded and replicated to it.
	if _, err := put(ctx, n4, "via", "n4"); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, all)
	time.Sleep(500 * time.Millisecond) // a few reconcile rounds: still not promoted
	for _, s := range servers(t, leader) {
		if s.ID == "n4" && s.Suffrage != raft.Nonvoter {
			t.Fatal("n4 promoted while three voters are healthy")
		}
	}

	// No cluster token: refused.
	conn, err := grpc.NewClient(leader.GRPCAddr(), DialOptions(nil, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pb.NewClusterClient(conn).Status(ctx, &pb.StatusRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call without the secret: %v", err)
	}
	wrong, _ := grpc.NewClient(leader.GRPCAddr(), DialOptions(NewAuth("other"), nil)...)
	defer wrong.Close()
	if _, err = pb.NewClusterClient(wrong).Status(ctx, &pb.StatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call with a wrong secret: %v", err)
	}

	// Graceful leave.
	if err := n4.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n4 removed from raft and the catalog", func() bool {
		for _, s := range servers(t, leader) {
			if s.ID == "n4" {
				return false
			}
		}
		_, ok := leader.Status().Members, false
		leader.fsm.Read(func(s *fsm.State) { _, ok = s.Node("n4") })
		return !ok
	})
}

// TestFailover: the leader is killed; a new one is elected within 3 s,
// every acknowledged write is present, the dead node is marked failed in
// the catalog, and a session's 2 s TTL holds across the failover.
func TestFailover(t *testing.T) {
	nodes := startCluster(t, 3, "")
	leader := waitLeader(t, nodes, 5*time.Second)
	ctx := context.Background()

	var acked []string
	for i := range 20 {
		m := nodes[i%3]
		key := fmt.Sprintf("k%d", i)
		if _, err := put(ctx, m, key, key); err != nil {
			t.Fatalf("write %d via %s: %v", i, m.ID(), err)
		}
		acked = append(acked, key)
	}
	const ttl = 2 * time.Second
	created := time.Now()
	if _, err := nodes[0].Apply(ctx, &pb.SessionCreate{Session: &pb.Session{Id: "agent-1", Model: "m"}, TtlNanos: int64(ttl)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second - time.Since(created))

	var rest []*Member
	for _, m := range nodes {
		if m != leader {
			rest = append(rest, m)
		}
	}
	killed := time.Now()
	leader.Close()
	newLeader := waitLeader(t, rest, 3*time.Second)
	t.Logf("new leader %s after %v", newLeader.ID(), time.Since(killed))

	for i := 20; i < 30; i++ {
		key := fmt.Sprintf("k%d", i)
		if _, err := put(ctx, rest[i%2], key, key); err != nil {
			t.Fatalf("write after failover: %v", err)
		}
		acked = append(acked, key)
	}
	for _, m := range rest {
		if err := m.ConsistentRead(ctx); err != nil {
			t.Fatal(err)
		}
		m.fsm.Read(func(s *fsm.State) {
			for _, k := range acked {
				if v, ok := s.Setting(k); !ok || string(v.Value) != k {
					t.Errorf("%s lost acknowledged write %s", m.ID(), k)
				}
			}
		})
	}

	// The session: alive until 2 s after creation, gone (reaped) soon after.
	if time.Since(created) < ttl-100*time.Millisecond {
		if _, ok := rest[0].Session("agent-1"); !ok {
			t.Fatalf("session gone %v after creation, TTL %v", time.Since(created), ttl)
		}
	}
	waitFor(t, 4*time.Second, "session reaped", func() bool {
		var n int
		rest[0].fsm.Read(func(s *fsm.State) { n = len(s.AllSessions()) })
		return n == 0
	})
	if gone := time.Since(created); gone < ttl || gone > ttl+time.Second {
		t.Fatalf("session reaped %v after creation, TTL %v", gone, ttl)
	} else {
		t.Logf("session reaped %v after creation (TTL %v, leader killed at 1 s)", gone, ttl)
	}

	detect := waitFor(t, 10*time.Second, "dead leader marked failed", func() bool {
		return nodeStatusOf(newLeader, leader.ID()) == pb.NodeStatus_NODE_STATUS_FAILED
	})
	t.Logf("old leader marked failed %v after the kill", time.Since(killed))
	_ = detect
	waitSameState(t, rest)
}

// TestRestartCatchesUp: a follower stopped while writes continue comes
// back on the same data dir and new ports: it catches up, retried
// request ids are not applied twice, and its new addresses replace the
// old ones in raft and the catalog.
func TestRestartCatchesUp(t *testing.T) {
	nodes := startCluster(t, 3, "")
	leader := waitLeader(t, nodes, 5*time.Second)
	ctx := context.Background()
	var follower *Member
	for _, m := range nodes {
		if m != leader {
			follower = m
			break
		}
	}
	id, dir, oldRaft, oldGRPC := follower.ID(), follower.cfg.DataDir, follower.RaftAddr(), follower.GRPCAddr()
	counter := &pb.SettingPut{RequestId: "req-counter", Key: "counter", Value: []byte("1")}
	first, err := leader.Apply(ctx, counter)
	if err != nil {
		t.Fatal(err)
	}
	follower.Close()
	waitFor(t, 10*time.Second, "stopped follower marked failed", func() bool {
		return nodeStatusOf(leader, id) == pb.NodeStatus_NODE_STATUS_FAILED
	})
	for i := range 30 {
		if _, err := put(ctx, leader, fmt.Sprintf("after%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	again := testNode(t, id, dir, []string{leader.GossipAddr()}, 3, "")
	if again.RaftAddr() == oldRaft || again.GRPCAddr() == oldGRPC {
		t.Fatal("test needs new ports")
	}
	var live []*Member
	for _, m := range nodes {
		if m.ID() != id {
			live = append(live, m)
		}
	}
	live = append(live, again)
	waitFor(t, 10*time.Second, "new address in raft and the catalog", func() bool {
		var ok bool
		leader.fsm.Read(func(s *fsm.State) {
			n, found := s.Node(id)
			ok = found && n.GrpcAddr == again.GRPCAddr() && n.Status == pb.NodeStatus_NODE_STATUS_ALIVE
		})
		count := 0
		for _, s := range servers(t, leader) {
			if string(s.ID) == id {
				count++
				ok = ok && string(s.Address) == again.RaftAddr() && s.Suffrage == raft.Voter
			}
			if string(s.Address) == oldRaft {
				ok = false
			}
		}
		return ok && count == 1
	})
	waitSameState(t, live)
	// The retried request applies once, through the restarted node.
	r, err := again.Apply(ctx, &pb.SettingPut{RequestId: "req-counter", Key: "counter", Value: []byte("1")})
	if err != nil || !r.Duplicate || r.Index != first.Index {
		t.Fatalf("retry: %+v %v (first at %d)", r, err, first.Index)
	}
	var v *pb.Setting
	again.fsm.Read(func(s *fsm.State) { v, _ = s.Setting("counter") })
	if v.GetVersion() != first.Value {
		t.Fatalf("counter version %d, want %d", v.GetVersion(), first.Value)
	}
	// Writes keep working with the restarted node in the quorum.
	if _, err := put(ctx, again, "final", "x"); err != nil {
		t.Fatal(err)
	}
	waitSameState(t, live)
}

// TestSessionCapUnderConcurrency: 50 goroutines create sessions through
// random nodes; exactly cap succeed and no node ever sees more.
func TestSessionCapUnderConcurrency(t *testing.T) {
	nodes := startCluster(t, 3, "")
	ctx := context.Background()
	const capN, workers, each = 60, 50, 3
	var mu sync.Mutex
	ok, capped := 0, 0
	var wg sync.WaitGroup
	var stop = make(chan struct{})
	var maxSeen int
	go func() { // watch every node's live count while creates run
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, m := range nodes {
				if n := len(m.Sessions()); n > maxSeen {
					mu.Lock()
					maxSeen = n
					mu.Unlock()
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := nodes[rand.IntN(len(nodes))]
				_, err := m.Apply(ctx, &pb.SessionCreate{Session: &pb.Session{Id: fmt.Sprintf("s-%d-%d", w, i)},
					TtlNanos: int64(time.Hour), MaxSessions: capN})
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, fsm.ErrSessionCap):
					capped++
				default:
					t.Errorf("create: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	if ok != capN || capped != workers*each-capN {
		t.Fatalf("%d created, %d refused; want %d and %d", ok, capped, capN, workers*each-capN)
	}
	waitSameState(t, nodes)
	mu.Lock()
	defer mu.Unlock()
	if maxSeen > capN {
		t.Fatalf("a node saw %d live sessions, cap %d", maxSeen, capN)
	}
	for _, m := range nodes {
		if n := len(m.Sessions()); n != capN {
			t.Fatalf("%s has %d sessions", m.ID(), n)
		}
	}
}

func TestAdminHandler(t *testing.T) {
	m := testNode(t, "solo", t.TempDir(), nil, 0, "")
	waitLeader(t, []*Member{m}, 5*time.Second)
	ctx := context.Background()
	waitFor(t, 5*time.Second, "self in the catalog", func() bool { return nodeStatusOf(m, "solo") == pb.NodeStatus_NODE_STATUS_ALIVE })
	if _, err := m.Apply(ctx, &pb.PlacementPut{Placement: &pb.Placement{Model: "qwen", NumLayers: 4,
		Stages: []*pb.Stage{{Node: "solo", LayerStart: 0, LayerEnd: 4}}}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.AdminHandler())
	defer srv.Close()
	tests := []struct {
		method, path, body string
		code               int
	}{
		{http.MethodGet, "/admin/api/cluster", "", 200},
		{http.MethodGet, "/admin/api/cluster?consistent", "", 200},
		{http.MethodPost, "/admin/api/cluster", "", 405},
		{http.MethodGet, "/admin/api/cluster/nope", "", 404},
		{http.MethodGet, "/admin/api/cluster/settings/k", "", 404},
		{http.MethodPut, "/admin/api/cluster/settings/k", `{"value":"a","expect_version":7}`, 409},
		{http.MethodPut, "/admin/api/cluster/settings/k", `{"value":"a","expect_version":0}`, 200},
		{http.MethodPut, "/admin/api/cluster/settings/k", `{"value":"b","expect_version":0}`, 409},
		{http.MethodPut, "/admin/api/cluster/settings/k", `{"value":"c"}`, 200},
		{http.MethodPut, "/admin/api/cluster/settings/k", `{"valu":"c"}`, 400},
		{http.MethodPut, "/admin/api/cluster/settings/k", `not json`, 400},
		{http.MethodGet, "/admin/api/cluster/settings/k?consistent", "", 200},
		{http.MethodDelete, "/admin/api/cluster/settings/k", "", 405},
		// The MCP configuration holds secrets: its own route shows it masked.
		{http.MethodGet, "/admin/api/cluster/settings/mcp/servers", "", 403},
		{http.MethodPut, "/admin/api/cluster/settings/mcp/servers", `{"value":"{}"}`, 403},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != tc.code || err != nil {
			t.Fatalf("%s %s: %d %v", tc.method, tc.path, resp.StatusCode, err)
		}
		if tc.code != 200 {
			if _, ok := doc["error"]; !ok {
				t.Fatalf("error body %v", doc)
			}
			if tc.code == 409 && doc["current_version"] == nil {
				t.Fatalf("conflict without the current version: %v", doc)
			}
			continue
		}
		if strings.Contains(tc.path, "/settings/") {
			if tc.method == http.MethodGet && (doc["value"] != "c" || doc["version"].(float64) == 0) {
				t.Fatalf("setting %v", doc)
			}
			continue
		}
		members := doc["members"].([]any)
		mem := members[0].(map[string]any)
		pl := doc["placements"].([]any)[0].(map[string]any)
		if doc["self"] != "solo" || doc["leader"] != "solo" || len(members) != 1 || mem["id"] != "solo" ||
			mem["grpc"] != m.GRPCAddr() || mem["http"] != "http://solo.test" || mem["status"] != "alive" || mem["voter"] != true ||
			pl["model"] != "qwen" || pl["stages"].([]any)[0].(map[string]any)["state"] != "assigned" {
			t.Fatalf("document %v", doc)
		}
	}
}

// TestLeaderTransferDuringWrites: writes keep flowing through every node
// while leadership moves; every acknowledged write is present once, and
// re-sending each request id returns the original outcome.
func TestLeaderTransferDuringWrites(t *testing.T) {
	nodes := startCluster(t, 3, "")
	leader := waitLeader(t, nodes, 5*time.Second)
	ctx := context.Background()
	type ack struct {
		rid   string
		index uint64
	}
	var mu sync.Mutex
	var acks []ack
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rid := fmt.Sprintf("w%d-%d", w, i)
				r, err := nodes[(w+i)%3].Apply(ctx, &pb.SettingPut{RequestId: rid, Key: rid, Value: []byte("x")})
				if err != nil {
					t.Errorf("%s: %v", rid, err)
					return
				}
				mu.Lock()
				acks = append(acks, ack{rid, r.Index})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if err := leader.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	newLeader := waitLeader(t, nodes, 5*time.Second)
	if newLeader == leader {
		t.Fatal("leadership did not move")
	}
	waitSameState(t, nodes)
	var n int
	nodes[0].fsm.Read(func(s *fsm.State) { n = len(s.Settings()) })
	if n != len(acks) {
		t.Fatalf("%d settings for %d acknowledged writes", n, len(acks))
	}
	for _, a := range acks {
		r, err := nodes[rand.IntN(3)].Apply(ctx, &pb.SettingPut{RequestId: a.rid, Key: a.rid, Value: []byte("x")})
		if err != nil || !r.Duplicate || r.Index != a.index {
			t.Fatalf("re-sent %s: %+v %v (acknowledged at %d)", a.rid, r, err, a.index)
		}
	}
	t.Logf("%d writes across a leadership transfer from %s to %s", len(acks), leader.ID(), newLeader.ID())
}
