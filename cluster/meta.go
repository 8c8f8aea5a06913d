package cluster

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// Meta is what a node gossips about itself; it must fit memberlist's
// MetaMaxSize (512 bytes) in its JSON form.
type Meta struct {
	ID              string `json:"id"`
	HTTP            string `json:"h,omitempty"`
	GRPC            string `json:"g,omitempty"`
	Raft            string `json:"r,omitempty"`
	Role            string `json:"ro,omitempty"`
	Version         string `json:"v,omitempty"`
	Draining        bool   `json:"d,omitempty"`
	Leaving         bool   `json:"l,omitempty"` // a graceful leave is under way
	BootstrapExpect int    `json:"e,omitempty"`
	// Load is the node's generations in flight (a coarse figure gossiped
	// at most every LoadGossipInterval; the exact one travels on the
	// Engine service's stats stream). The placement planner prefers
	// less loaded nodes.
	Load int64 `json:"ld,omitempty"`
	// Inventory is the fingerprint of the inventory the node is
	// recording (Inventory.Fingerprint), gossiped before the log carries
	// it, so a peer can tell whether it has heard the node's current
	// inventory (Member.Unheard).
	Inventory string `json:"iv,omitempty"`
	// Backend is the compute backend the node's models run on (mlx, cpu).
	Backend string `json:"be,omitempty"`
}

func (m Meta) encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("cluster: node metadata (id, addresses, role, version) is %d bytes as JSON, memberlist's limit is %d: shorten the node id or the advertised addresses", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (Meta, bool) {
	var m Meta
	if len(b) == 0 || json.Unmarshal(b, &m) != nil || m.ID == "" {
		return Meta{}, false
	}
	return m, true
}
