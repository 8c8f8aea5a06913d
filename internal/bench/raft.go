package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
)

// RaftOptions are the settings of the Raft benchmark.
type RaftOptions struct {
	Writes    int           // sequential writes per latency series
	Duration  time.Duration // time of the concurrent-writers run
	Writers   int           // concurrent writers
	Failovers int           // leader kills timed with the default (production) raft and gossip timings
}

// DefaultRaftOptions are the settings `make bench` uses.
func DefaultRaftOptions() RaftOptions {
	return RaftOptions{Writes: 300, Duration: 2 * time.Second, Writers: 16, Failovers: 3}
}

// Raft measures control-plane write latency: Raft Apply of a small
// setting on a one-node cluster and on a three-node loopback cluster
// (proposed on the leader, and forwarded from a follower over gRPC), and
// write throughput with concurrent writers. Data dirs are in $TMPDIR.
func Raft(ctx context.Context, o RaftOptions, stdout io.Writer) error {
	if o.Writes < 1 || o.Writers < 1 {
		return optionErrorf("-writes and -writers must be positive")
	}
	dir, err := os.MkdirTemp("", "fusion-bench-raft-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	solo, err := benchMembers(ctx, dir, "solo", 1, cluster.TestTiming())
	if err != nil {
		return err
	}
	soloLat, err := applySeries(ctx, solo[0], o.Writes)
	closeAll(solo)
	if err != nil {
		return err
	}

	three, err := benchMembers(ctx, dir, "trio", 3, cluster.TestTiming())
	if err != nil {
		return err
	}
	defer closeAll(three)
	leader, follower := three[0], three[1]
	for _, m := range three {
		if m.IsLeader() {
			leader = m
		}
	}
	for _, m := range three {
		if m != leader {
			follower = m
		}
	}
	leaderLat, err := applySeries(ctx, leader, o.Writes)
	if err != nil {
		return err
	}
	fwdLat, err := applySeries(ctx, follower, o.Writes)
	if err != nil {
		return err
	}
	rate, err := applyRate(ctx, three, o.Writers, o.Duration)
	if err != nil {
		return err
	}
	closeAll(three)
	var fo []float64
	for i := range o.Failovers {
		d, err := timeFailover(ctx, filepath.Join(dir, fmt.Sprintf("fo%d", i)))
		if err != nil {
			return err
		}
		fo = append(fo, d)
	}
	slices.Sort(fo)
	out := map[string]any{
		"unit":                     "ms",
		"single_node":              soloLat,
		"three_nodes_on_leader":    leaderLat,
		"three_nodes_forwarded":    fwdLat,
		"three_nodes_writes_per_s": rate,
		"three_nodes_writers":      o.Writers,
		"failover_new_leader_ms":   fo,
		"note": "SettingPut through raft, bbolt log in $TMPDIR, loopback; forwarded = proposed on a follower, sent to the leader over gRPC; " +
			"failover = ms from killing the leader (default timings: raft heartbeat and election 500 ms) until both survivors agree on a new one",
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(out)
}

// timeFailover forms a three-node cluster with the default timings, kills
// the leader and returns the milliseconds until the others agree on a new
// one.
func timeFailover(ctx context.Context, dir string) (float64, error) {
	ms, err := benchMembers(ctx, dir, "fo", 3, cluster.Timing{})
	if err != nil {
		return 0, err
	}
	defer closeAll(ms)
	var leader *cluster.Member
	var rest []*cluster.Member
	for _, m := range ms {
		if m.IsLeader() {
			leader = m
		} else {
			rest = append(rest, m)
		}
	}
	if leader == nil {
		return 0, fmt.Errorf("bench raft: no leader")
	}
	old := leader.ID()
	start := time.Now()
	leader.Close()
	for time.Since(start) < 30*time.Second {
		a, b := rest[0].Leader(), rest[1].Leader()
		if a != "" && a != old && a == b {
			return float64(time.Since(start).Microseconds()) / 1000, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("bench raft: no new leader 30 s after the kill")
}

func benchMembers(ctx context.Context, dir, name string, n int, timing cluster.Timing) ([]*cluster.Member, error) {
	logger := slog.New(slog.DiscardHandler)
	var ms []*cluster.Member
	var seeds []string
	for i := range n {
		m, err := cluster.New(cluster.Config{
			NodeID: fmt.Sprintf("%s%d", name, i), DataDir: filepath.Join(dir, fmt.Sprintf("%s%d", name, i)),
			GossipListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0",
			Join: seeds, BootstrapExpect: n, Timing: timing, Logger: logger,
		})
		if err != nil {
			closeAll(ms)
			return nil, err
		}
		if err := m.Start(ctx); err != nil {
			m.Close()
			closeAll(ms)
			return nil, err
		}
		ms = append(ms, m)
		if i == 0 {
			seeds = []string{m.GossipAddr()}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ready := true
		for _, m := range ms {
			if m.Leader() == "" {
				ready = false
			}
		}
		if ready {
			// One write through each node proves the forwarding path too.
			for _, m := range ms {
				if _, err := m.Apply(ctx, &pb.SettingPut{Key: "warmup", Value: []byte("x")}); err != nil {
					ready = false
				}
			}
		}
		if ready {
			return ms, nil
		}
		if time.Now().After(deadline) {
			closeAll(ms)
			return nil, fmt.Errorf("bench raft: %d-node cluster not ready", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func closeAll(ms []*cluster.Member) {
	for _, m := range ms {
		m.Close()
	}
}

type latency struct {
	N     int     `json:"n"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Total float64 `json:"total_s"`
}

func applySeries(ctx context.Context, m *cluster.Member, n int) (latency, error) {
	lat := make([]float64, 0, n)
	start := time.Now()
	for i := range n {
		t := time.Now()
		if _, err := m.Apply(ctx, &pb.SettingPut{Key: "bench", Value: []byte(fmt.Sprint(i))}); err != nil {
			return latency{}, err
		}
		lat = append(lat, float64(time.Since(t).Microseconds())/1000)
	}
	total := time.Since(start).Seconds()
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return latency{N: n, P50: q(0.50), P99: q(0.99), Max: lat[len(lat)-1], Total: total}, nil
}

// applyRate runs writers spread over the nodes for d and returns writes/s.
func applyRate(ctx context.Context, ms []*cluster.Member, writers int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := ms[w%len(ms)]
			for i := 0; ctx.Err() == nil; i++ {
				_, err := m.Apply(ctx, &pb.SettingPut{Key: fmt.Sprintf("w%d", w), Value: []byte(fmt.Sprint(i))})
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(done.Load()) / time.Since(start).Seconds(), nil
}
