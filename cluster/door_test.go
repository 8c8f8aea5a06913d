package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// TestOutsiderLocked: a process on the same host that is not a member,
// with no secret or a wrong one, cannot join a secured cluster by gossip,
// cannot send raft RPCs to its leader, and cannot read or write through
// the Cluster gRPC service; the cluster's state does not move.
func TestOutsiderLocked(t *testing.T) {
	nodes := startCluster(t, 3, "s")
	leader := waitLeader(t, nodes, 15*time.Second)
	waitFor(t, 10*time.Second, "three members", func() bool { return leader.ml.NumMembers() == 3 })
	before, _ := stateBytes(leader)
	term := leader.raft.CurrentTerm()

	for _, secret := range []string{"", "wrong"} {
		name := map[string]string{"": "no secret", "wrong": "wrong secret"}[secret]
		t.Run(name+"/gossip", func(t *testing.T) {
			out := testNode(t, "outsider-"+secret, t.TempDir(), []string{leader.GossipAddr()}, 0, secret, func(c *Config) { c.Insecure = true })
			time.Sleep(1500 * time.Millisecond)
			if n := out.ml.NumMembers(); n != 1 {
				t.Fatalf("the outsider sees %d members", n)
			}
			for _, m := range nodes {
				for _, n := range m.ml.Members() {
					if n.Name == out.ID() {
						t.Fatalf("%s lists the outsider", m.ID())
					}
				}
			}
		})
		t.Run(name+"/raft", func(t *testing.T) {
			// A raft transport of our own, speaking raft's wire protocol:
			// a vote request with a higher term (a read of the leader's
			// term, and a write: it would depose the leader) and an append.
			trans := raft.NewNetworkTransport(&streamLayer{Listener: nopListener{}, auth: NewAuth(secret), timeout: 500 * time.Millisecond},
				1, time.Second, nil)
			defer trans.Close()
			addr := raft.ServerAddress(leader.RaftAddr())
			var vote raft.RequestVoteResponse
			err := trans.RequestVote("n1", addr, &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("outsider"), Addr: []byte("x")},
				Term: term + 10, LastLogIndex: 1 << 40, LastLogTerm: term + 10}, &vote)
			if err == nil {
				t.Fatalf("vote request answered: %+v", vote)
			}
			var app raft.AppendEntriesResponse
			err = trans.AppendEntries("n1", addr, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("outsider"), Addr: []byte("x")},
				Term: term + 10, Leader: []byte("x"), Entries: []*raft.Log{{Index: 1 << 40, Term: term + 10, Type: raft.LogCommand, Data: []byte{1}}}}, &app)
			if err == nil {
				t.Fatalf("append answered: %+v", app)
			}
		})
		t.Run(name+"/grpc", func(t *testing.T) {
			conn, err := grpc.NewClient(leader.GRPCAddr(), DialOptions(NewAuth(secret), nil)...)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := pb.NewClusterClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if _, err := c.Status(ctx, &pb.StatusRequest{}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("read (Status): %v", err)
			}
			if _, err := c.ReadIndex(ctx, &pb.ReadIndexRequest{}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("read (ReadIndex): %v", err)
			}
			cmd, err := fsm.Encode(&pb.APIKeyPut{RequestId: "outsider", Key: &pb.APIKey{Id: "mine", Hash: []byte("h"), Scopes: []string{"admin"}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Apply(ctx, &pb.ApplyRequest{Command: cmd}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("write (Apply): %v", err)
			}
		})
	}
	// The outsider's vote claimed term+10: had a node read it, it would
	// have taken that term. (Elections of the members' own may move the
	// term a little on a loaded machine.)
	for _, m := range nodes {
		if got := m.raft.CurrentTerm(); got >= term+10 {
			t.Fatalf("%s took the outsider's term: %d (was %d)", m.ID(), got, term)
		}
	}
	for _, m := range nodes {
		if idx, _ := stateBytes(m); idx < before {
			t.Fatalf("%s went back", m.ID())
		}
		m.fsm.Read(func(s *fsm.State) {
			if len(s.APIKeys()) != 0 {
				t.Fatalf("%s holds the outsider's key", m.ID())
			}
		})
	}
}

// nopListener lets a streamLayer dial without listening.
type nopListener struct{}

func (nopListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (nopListener) Close() error              { return nil }
func (nopListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// TestSecretRotation: members given two secrets, sending either one,
// form one cluster and replicate (gossip, raft and gRPC all accept both);
// a node that knows neither stays out.
func TestSecretRotation(t *testing.T) {
	withAccept := func(s ...string) func(*Config) { return func(c *Config) { c.SecretAccept = s } }
	a := testNode(t, "n1", t.TempDir(), nil, 3, "old", withAccept("new"))
	seed := []string{a.GossipAddr()}
	b := testNode(t, "n2", t.TempDir(), seed, 3, "new", withAccept("old"))
	c := testNode(t, "n3", t.TempDir(), seed, 3, "old", withAccept("new"))
	nodes := []*Member{a, b, c}
	leader := waitLeader(t, nodes, 15*time.Second)
	for _, m := range nodes {
		if m == leader {
			continue
		}
		if _, err := m.Apply(context.Background(), &pb.SettingPut{Key: "from-" + m.ID(), Value: []byte("v")}); err != nil {
			t.Fatalf("write through %s: %v", m.ID(), err)
		}
	}
	waitSameState(t, nodes)
	out := testNode(t, "outsider", t.TempDir(), seed, 0, "third")
	time.Sleep(1500 * time.Millisecond)
	if n := out.ml.NumMembers(); n != 1 {
		t.Fatalf("a node with a third secret sees %d members", n)
	}
}

// TestExposedListeners: without a secret, listeners beyond loopback are
// refused unless Insecure; loopback ones are fine.
func TestExposedListeners(t *testing.T) {
	tests := []struct {
		gossip, raft, grpc, secret string
		insecure, ok               bool
	}{
		{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "", false, true},
		{"localhost:0", "[::1]:0", "127.0.0.1:0", "", false, true},
		{"0.0.0.0:0", "127.0.0.1:0", "127.0.0.1:0", "", false, false},
		{"127.0.0.1:0", ":0", "127.0.0.1:0", "", false, false},
		{"127.0.0.1:0", "127.0.0.1:0", "0.0.0.0:0", "", false, false},
		{"0.0.0.0:0", "0.0.0.0:0", "0.0.0.0:0", "s", false, true},
		{"0.0.0.0:0", "0.0.0.0:0", "0.0.0.0:0", "", true, true},
	}
	for _, tc := range tests {
		c := Config{NodeID: "x", DataDir: "d", GossipListen: tc.gossip, RaftListen: tc.raft, GRPCListen: tc.grpc, Secret: tc.secret, Insecure: tc.insecure}
		err := c.defaults()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrExposed)) {
			t.Errorf("%+v: %v", tc, err)
		}
	}
}
