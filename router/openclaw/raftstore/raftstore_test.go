package raftstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/router/openclaw"
	"fusion/router/openclaw/raftstore"
	"fusion/router/openclaw/storetest"
)

func member(t *testing.T, id string, join []string, expect int) *cluster.Member {
	t.Helper()
	m, err := cluster.New(cluster.Config{
		NodeID: id, DataDir: t.TempDir(), GossipListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
		HTTPAdvertise: "http://" + id + ".test", Join: join, BootstrapExpect: expect, Version: "test",
		ReapInterval: 50 * time.Millisecond, ReconcileInterval: time.Second, DeadServerGrace: time.Hour, LeaveDelay: 100 * time.Millisecond,
		Timing: cluster.TestTiming(),
	})
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

func waitLeader(t *testing.T, ms ...*cluster.Member) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range ms {
			if m.IsLeader() {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no leader")
}

// TestConformanceOneNode: the Raft store on a lone member passes the
// suite MemStore passes.
func TestConformanceOneNode(t *testing.T) {
	storetest.Run(t, func(t *testing.T, ttl time.Duration, capacity int) openclaw.SessionStore {
		m := member(t, "n1", nil, 1)
		waitLeader(t, m)
		s := raftstore.New(m, raftstore.Options{TTL: ttl, Cap: capacity})
		t.Cleanup(s.Close)
		return s
	})
}

// TestConformanceFollower: the same suite through a follower of a
// three-node cluster (writes forwarded to the leader, reads local).
func TestConformanceFollower(t *testing.T) {
	storetest.Run(t, func(t *testing.T, ttl time.Duration, capacity int) openclaw.SessionStore {
		first := member(t, "n1", nil, 3)
		ms := []*cluster.Member{first}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := 2; i <= 3; i++ {
			wg.Go(func() {
				m := member(t, fmt.Sprintf("n%d", i), []string{first.GossipAddr()}, 3)
				mu.Lock()
				ms = append(ms, m)
				mu.Unlock()
			})
		}
		wg.Wait()
		waitLeader(t, ms...)
		var follower *cluster.Member
		for _, m := range ms {
			if !m.IsLeader() {
				follower = m
				break
			}
		}
		s := raftstore.New(follower, raftstore.Options{TTL: ttl, Cap: capacity})
		t.Cleanup(s.Close)
		return s
	})
}

// TestListAfterWriteElsewhere: a listing on one follower includes a
// session created through the other a moment before, and leaves out one
// destroyed there (reads are local, so a follower lagging the log would
// list what the client has just changed wrongly).
func TestListAfterWriteElsewhere(t *testing.T) {
	first := member(t, "n1", nil, 3)
	ms := []*cluster.Member{first}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 2; i <= 3; i++ {
		wg.Go(func() {
			m := member(t, fmt.Sprintf("n%d", i), []string{first.GossipAddr()}, 3)
			mu.Lock()
			ms = append(ms, m)
			mu.Unlock()
		})
	}
	wg.Wait()
	waitLeader(t, ms...)
	var stores []*raftstore.Store
	for _, m := range ms {
		if !m.IsLeader() {
			s := raftstore.New(m, raftstore.Options{Cap: 1000})
			t.Cleanup(s.Close)
			stores = append(stores, s)
		}
	}
	writer, reader := stores[0], stores[1]
	ctx := context.Background()
	listed := func(id string) bool {
		t.Helper()
		list, err := reader.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list, func(s *openclaw.Session) bool { return s.ID == id })
	}
	for i := range 30 {
		id := fmt.Sprintf("s%02d", i)
		if _, err := writer.Create(ctx, openclaw.NewSession{ID: id, Model: "m"}); err != nil {
			t.Fatal(err)
		}
		if !listed(id) {
			t.Fatalf("round %d: the reader does not list the session just created", i)
		}
		if err := writer.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		if listed(id) {
			t.Fatalf("round %d: the reader lists the session just destroyed", i)
		}
	}
}
