package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

// TestMetaSizeCap: node metadata up to memberlist's 512 bytes encodes;
// one byte more is refused, and New refuses a node whose metadata would
// not fit with an error naming the size, the limit and the fix.
func TestMetaSizeCap(t *testing.T) {
	base := Meta{ID: "n", HTTP: "http://10.0.0.1:8000", GRPC: "10.0.0.1:7948", Raft: "10.0.0.1:7947", Role: "server", Version: "v1"}
	b, err := base.encode()
	if err != nil {
		t.Fatal(err)
	}
	fit := base
	fit.ID = strings.Repeat("x", memberlist.MetaMaxSize-len(b)+1) // exactly the limit
	if b, err := fit.encode(); err != nil || len(b) != memberlist.MetaMaxSize {
		t.Fatalf("metadata of %d bytes: %v", len(b), err)
	}
	over := fit
	over.ID += "x"
	if _, err := over.encode(); err == nil || !strings.Contains(err.Error(), "513 bytes") || !strings.Contains(err.Error(), "limit is 512") {
		t.Fatalf("metadata of 513 bytes: %v", err)
	}

	cfg := Config{NodeID: strings.Repeat("n", 600), DataDir: t.TempDir(),
		GossipListen: "127.0.0.1:0", RaftListen: "127.0.0.1:0", GRPCListen: "127.0.0.1:0", Timing: TestTiming()}
	m, err := New(cfg)
	if err == nil {
		m.Close()
		t.Fatal("New accepted a node id of 600 bytes")
	}
	if !strings.Contains(err.Error(), "limit is 512") || !strings.Contains(err.Error(), "shorten the node id") {
		t.Fatalf("New: %v", err)
	}
	// The same config with a short id is accepted.
	cfg.NodeID = "n1"
	m, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}
