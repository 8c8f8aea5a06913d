package cluster

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRaftHandshake: raft connections need the cluster secret.
func TestRaftHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &streamLayer{Listener: ln, auth: NewAuth("right"), timeout: time.Second}
	defer server.Close()
	accepted := make(chan []byte, 4)
	go func() {
		for {
			c, err := server.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4)
			_, err = io.ReadFull(c, buf)
			c.Close()
			if err == nil {
				accepted <- buf
			}
		}
	}()
	tests := []struct {
		name   string
		auth   *Auth
		accept bool
	}{
		{"same secret", NewAuth("right"), true},
		{"wrong secret", NewAuth("wrong"), false},
		{"no secret", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := &streamLayer{auth: tc.auth, timeout: 300 * time.Millisecond}
			c, err := client.Dial(raft.ServerAddress(ln.Addr().String()), time.Second)
			if err == nil {
				c.Write([]byte("ping"))
				defer c.Close()
			}
			select {
			case got := <-accepted:
				if !tc.accept || string(got) != "ping" {
					t.Fatalf("accepted %q", got)
				}
			case <-time.After(1500 * time.Millisecond):
				if tc.accept {
					t.Fatalf("refused (dial err %v)", err)
				}
			}
		})
	}
}

// TestGossipNeedsSecret: a node with another secret cannot join.
func TestGossipNeedsSecret(t *testing.T) {
	a := testNode(t, "a", t.TempDir(), nil, 0, "one")
	b := testNode(t, "b", t.TempDir(), []string{a.GossipAddr()}, 0, "two")
	time.Sleep(time.Second)
	if n := a.ml.NumMembers(); n != 1 {
		t.Fatalf("a sees %d members", n)
	}
	if n := b.ml.NumMembers(); n != 1 {
		t.Fatalf("b sees %d members", n)
	}
}
