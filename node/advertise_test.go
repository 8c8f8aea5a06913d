package node_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
	"fusion/node/nodetest"
)

// TestClusterAdvertise: node a listens on every interface and advertises
// 127.0.0.2 (another loopback address, standing in for the address a NAT
// or a second interface gives); b knows a only by that address. Gossip,
// raft and gRPC all use the advertised addresses: b sees them in a's
// metadata, replicates a's log from them, forwards a write and an
// inference request to them.
func TestClusterAdvertise(t *testing.T) {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ac := nodetest.Member("a", 1, nil)
	ac.Listen, ac.RaftListen, ac.GRPCListen, ac.Advertise = "0.0.0.0:"+strconv.Itoa(port), "0.0.0.0:0", "0.0.0.0:0", "127.0.0.2"
	ac.Insecure = true // every interface without a secret: this test is about addresses
	a := nodetest.Start(t, nodetest.Options{Cluster: ac})
	b := nodetest.Start(t, nodetest.Options{ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, []string{"127.0.0.2:" + strconv.Itoa(port)})})

	am := a.Cluster()
	for what, addr := range map[string]string{"gossip": am.GossipAddr(), "raft": am.RaftAddr(), "grpc": am.GRPCAddr()} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.2" {
			t.Fatalf("a's advertised %s address %q, want host 127.0.0.2", what, addr)
		}
	}
	if am.GossipAddr() != "127.0.0.2:"+strconv.Itoa(port) {
		t.Fatalf("a's gossip address %q, want the listen port %d", am.GossipAddr(), port)
	}
	waitUntil(t, 15*time.Second, "b follows a and sees its advertised addresses", func() bool {
		if b.Cluster().Leader() != "a" {
			return false
		}
		for _, m := range b.Cluster().Members() {
			if m.ID == "a" {
				return m.Gossip == am.GossipAddr() && m.Raft == am.RaftAddr() && m.GRPC == am.GRPCAddr() && m.Status == cluster.StatusAlive
			}
		}
		return false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := b.Cluster().Apply(ctx, &pb.SettingPut{Key: "via", Value: []byte("b")})
	if err != nil {
		t.Fatalf("a write through b, forwarded to a's advertised gRPC address: %v", err)
	}
	waitUntil(t, 5*time.Second, "b applies its own write, replicated from a", func() bool {
		return b.Cluster().FSM().AppliedIndex() >= r.Index
	})
	waitUntil(t, 15*time.Second, "b forwards an inference request to a", func() bool {
		code, by, _ := chatOn(t, b)
		return code == 200 && by == "a"
	})
}

// TestClusterNodeIDDefaultsToHostname: a cluster node without an id
// takes the hostname, in the cluster and in X-Fusion-Node.
func TestClusterNodeIDDefaultsToHostname(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skipf("skipped: no hostname: %v", err)
	}
	n := nodetest.Start(t, nodetest.Options{Cluster: nodetest.Member("", 1, nil)})
	if id := n.Cluster().ID(); id != host {
		t.Fatalf("node id %q, want the hostname %q", id, host)
	}
	waitUntil(t, 10*time.Second, "the lone node leading", func() bool { return n.Cluster().IsLeader() })
	if code, by, _ := chatOn(t, n); code != 200 || by != host {
		t.Fatalf("answer %d from %q, want the hostname %q", code, by, host)
	}
}
