package raftstore_test

import (
	"context"
	"errors"
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

// threeMembers starts a three-voter cluster (n1 first) and waits for
// its leader.
func threeMembers(t *testing.T) []*cluster.Member {
	t.Helper()
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
	return ms
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
		ms := threeMembers(t)
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
	ms := threeMembers(t)
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

// TestNoLeaderIsUnavailable: on a member whose two peers are gone (no
// quorum, no leader), every store operation fails with
// openclaw.ErrUnavailable — a 503 the client retries, not a 500 — and
// the handler's error carries Retry-After.
func TestNoLeaderIsUnavailable(t *testing.T) {
	ms := threeMembers(t)
	s := raftstore.New(ms[0], raftstore.Options{Cap: 10})
	t.Cleanup(s.Close)
	ctx := context.Background()
	se, err := s.Create(ctx, openclaw.NewSession{ID: "s1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[1:] {
		m.Close()
	}
	// Right after the others close, a leader can still confirm one read
	// with heartbeat answers already on their way (hashicorp/raft counts
	// any answer that arrives after the read began; CI saw a Get answer
	// in 3 ms), so the operations start once this node knows no leader.
	deadline := time.Now().Add(15 * time.Second)
	for ms[0].Leader() != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the lone member still sees leader %q", ms[0].Leader())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ops := map[string]func(ctx context.Context) error{
		"create": func(ctx context.Context) error {
			_, err := s.Create(ctx, openclaw.NewSession{ID: "s2", Model: "m"})
			return err
		},
		"list":       func(ctx context.Context) error { _, err := s.List(ctx); return err },
		"touch":      func(ctx context.Context) error { _, err := s.Touch(ctx, se.ID); return err },
		"begin turn": func(ctx context.Context) error { _, err := s.BeginTurn(ctx, se.ID); return err },
		"get absent": func(ctx context.Context) error { _, err := s.Get(ctx, "nope"); return err },
		"destroy":    func(ctx context.Context) error { return s.Destroy(ctx, se.ID) },
	}
	// In parallel: each waits out the member's hold time (5 s) first.
	var ops2 sync.WaitGroup
	for name, op := range ops {
		ops2.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			err := op(ctx)
			t.Logf("%s: %v after %v", name, err, time.Since(start).Round(time.Millisecond))
			if !errors.Is(err, openclaw.ErrUnavailable) {
				t.Errorf("%s without a leader: %v, want openclaw.ErrUnavailable", name, err)
			}
		})
	}
	ops2.Wait()
	// The session is still there, as this node last saw it.
	if got, err := s.Get(ctx, se.ID); err != nil || got.ID != se.ID {
		t.Errorf("Get of a known session without a leader: %v, %v", got, err)
	}
}

// TestConcurrentEditsKeepEveryMessage: steering messages appended at once
// through two followers all land in the history (each edit is a
// read-modify-write of the history; without a compare-and-set on the
// session's modify index one could overwrite another).
func TestConcurrentEditsKeepEveryMessage(t *testing.T) {
	ms := threeMembers(t)
	var stores []*raftstore.Store
	for _, m := range ms {
		s := raftstore.New(m, raftstore.Options{Cap: 10})
		t.Cleanup(s.Close)
		stores = append(stores, s)
	}
	ctx := context.Background()
	if _, err := stores[0].Create(ctx, openclaw.NewSession{ID: "s", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	const n = 12
	errs := make([]error, n)
	var edits sync.WaitGroup
	for i := range n {
		edits.Go(func() {
			msg := fmt.Appendf(nil, `{"role":"user","content":"m%d"}`, i)
			_, errs[i] = stores[i%len(stores)].Edit(ctx, "s", openclaw.Edit{Mode: openclaw.EditAppend, Message: msg})
		})
	}
	edits.Wait()
	if _, err := stores[0].List(ctx); err != nil { // a consistent read: every acknowledged edit is here
		t.Fatal(err)
	}
	landed := 0
	for _, err := range errs {
		if err == nil {
			landed++
		} else if !errors.Is(err, openclaw.ErrConflict) {
			t.Fatalf("edit: %v", err)
		}
	}
	se, err := stores[0].Get(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(se.History) != landed || landed < n/2 {
		t.Fatalf("%d edits acknowledged, %d messages in the history (%d refused with a conflict)", landed, len(se.History), n-landed)
	}
	t.Logf("%d concurrent appends through %d nodes: %d landed, %d asked to retry", n, len(stores), landed, n-landed)
}
