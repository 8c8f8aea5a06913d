package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/cluster/layersplit"
)

// Inventory is what a node reports about itself through the log
// (NodeSetInventory): the models it can serve and its memory. It changes
// when a model loads or unloads, not with load (live load is not Raft's).
type Inventory struct {
	ModelsOnDisk []string `json:"models_on_disk,omitempty"`
	ModelsLoaded []string `json:"models_loaded,omitempty"`
	MemoryTotal  int64    `json:"memory_total_bytes,omitempty"`
	MemoryFree   int64    `json:"memory_free_bytes,omitempty"`
	// Backend is the compute backend (mlx, cpu) the node's models run on,
	// and ModelBackends the models whose settings choose another one.
	Backend       string            `json:"backend,omitempty"`
	ModelBackends map[string]string `json:"model_backends,omitempty"`
	// Layers is the number of layers of each model on disk whose
	// configuration says it (what the planner splits a pipeline by).
	Layers map[string]int `json:"layers,omitempty"`
	// HeadLayers is each such model's output head counted in layers of
	// compute per token (what the planner adds to a pipeline's last stage).
	HeadLayers map[string]float64 `json:"head_layers,omitempty"`
	// MaxCut is, for a model whose stage boundaries are bounded, the last
	// layer a later stage may start at (Gemma 4: its KV-shared layers stay
	// with the layers whose KV they read); absent: any.
	MaxCut map[string]int `json:"max_cut,omitempty"`
	// Costs are, for a model whose files say them, its per-layer bytes
	// and compute (a mixture's layers hold all their experts, a token
	// reads a few): what the planner sizes stages by in place of the
	// even share of ModelBytes.
	Costs map[string]layersplit.Costs `json:"costs,omitempty"`
	// MemoryBudget is the bytes the node's models' weights and pipeline
	// stages may hold, and ModelBytes what each model on disk needs (its
	// weights and the KV cache of one sequence at its context): what the
	// planner decides by whether and how to shard a model (fit.go).
	MemoryBudget int64            `json:"memory_budget_bytes,omitempty"`
	ModelBytes   map[string]int64 `json:"model_bytes,omitempty"`
	// RTTMicros is the node's smoothed round-trip time to each peer in
	// microseconds, from gossip probes (rtt.go): what the planner orders
	// pipeline stages by. The member fills it in (SetInventory); it is
	// republished only when an RTT moved past the thresholds of RTTConfig.
	RTTMicros map[string]int64 `json:"rtt_us,omitempty"`
}

// BackendOf is the backend the node runs model on ("" when the inventory
// does not say).
func (inv Inventory) BackendOf(model string) string {
	if be, ok := inv.ModelBackends[model]; ok {
		return be
	}
	return inv.Backend
}

// Fingerprint names the models of the inventory (on disk and loaded, not
// the memory figures): equal fingerprints, equal model lists. The lists
// must be sorted, as SetInventory records them.
func (inv Inventory) Fingerprint() string {
	h := sha256.New()
	for _, list := range [][]string{inv.ModelsOnDisk, inv.ModelsLoaded} {
		for _, id := range list {
			h.Write([]byte(id))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// SetInventory records this node's inventory (skipped when unchanged),
// with this node's published RTT row in place of inv.RTTMicros. It
// first gossips the inventory's fingerprint, so peers know there is one
// they have not heard until the log brings it. A node just started may
// not be in the catalog yet: it waits for the leader to register it,
// until ctx is done.
func (m *Member) SetInventory(ctx context.Context, inv Inventory) error {
	slices.Sort(inv.ModelsOnDisk)
	slices.Sort(inv.ModelsLoaded)
	inv.RTTMicros = m.rtt.row(time.Now())
	b, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	m.announceInventory(inv)
	backoff := 50 * time.Millisecond
	for {
		var cur []byte
		m.fsm.Read(func(s *fsm.State) {
			if n, ok := s.Node(m.cfg.NodeID); ok {
				cur = n.Inventory
			}
		})
		if string(cur) == string(b) {
			return nil
		}
		_, err := m.Apply(ctx, &pb.NodeSetInventory{Id: m.cfg.NodeID, Inventory: b})
		if !errors.Is(err, fsm.ErrNotFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: node not registered yet: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// announceInventory gossips the fingerprint of the inventory this node is
// about to record, when it changed.
func (m *Member) announceInventory(inv Inventory) {
	fp := inv.Fingerprint()
	m.mu.Lock()
	changed := m.meta.Inventory != fp
	m.meta.Inventory = fp
	m.mu.Unlock()
	if changed && m.ml != nil {
		if err := m.ml.UpdateNode(m.cfg.ApplyTimeout); err != nil {
			m.log.Debug("gossip inventory fingerprint", "err", err)
		}
	}
}

// Route is a node that can serve a model, for the dispatcher.
type Route struct {
	ID   string
	GRPC string // its gRPC address (Engine service)
	HTTP string
}

// Routes returns the nodes where model is ready now — loaded according to
// their inventory, or an unsharded replica group whose stage is Ready —
// that gossip sees alive and not draining, sorted by id; and whether the
// model is known anywhere (on a disk, loaded, or placed). It reads only
// local state: routing never waits on the leader.
func (m *Member) Routes(model string) (ready []Route, known bool) {
	peers := m.peerSnapshot()
	usable := func(id string) bool {
		p, ok := peers[id]
		return ok && p.status == StatusAlive && !p.meta.Draining
	}
	seen := map[string]bool{}
	m.fsm.Read(func(s *fsm.State) {
		nodes := map[string]*pb.Node{}
		for _, n := range s.Nodes() {
			nodes[n.Id] = n
			var inv Inventory
			if json.Unmarshal(n.Inventory, &inv) != nil {
				continue
			}
			if slices.Contains(inv.ModelsOnDisk, model) || slices.Contains(inv.ModelsLoaded, model) {
				known = true
			}
			if slices.Contains(inv.ModelsLoaded, model) {
				seen[n.Id] = true
			}
		}
		pipes := map[string]bool{}
		sharded := false
		for _, p := range s.Placements() {
			if p.Model != model {
				continue
			}
			known = true
			if p.NumLayers > 0 {
				// A pipeline is served by its first stage, once every
				// stage is ready on a live node.
				sharded = true
				if pipelineState(p, usable) == "ready" {
					pipes[p.Stages[0].Node] = true
				}
				continue
			}
			if len(p.Stages) == 1 && p.Stages[0].State == pb.StageState_STAGE_STATE_READY {
				seen[p.Stages[0].Node] = true
			}
		}
		if sharded {
			// Not where a whole copy happens to be loaded: the model
			// runs where it is planned.
			seen = pipes
		}
		for id := range seen {
			n, ok := nodes[id]
			if !ok || !usable(id) {
				continue
			}
			grpc := n.GrpcAddr
			if p := peers[id]; p.meta.GRPC != "" {
				grpc = p.meta.GRPC
			}
			ready = append(ready, Route{ID: id, GRPC: grpc, HTTP: n.HttpAddr})
		}
	})
	slices.SortFunc(ready, func(a, b Route) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return ready, known
}

// Unheard lists the alive peers, not draining, with an Engine service (a
// gRPC address), whose current inventory this node has not heard: the
// replicated catalog has none for them yet, or one other than the
// fingerprint they gossip (a report on its way, or a restarted node that
// has not reported yet). Until it is empty, a model that Routes does not
// know may still be on one of their disks, so a miss is not a definitive
// "no such model". It reads only local state.
func (m *Member) Unheard() []Route {
	peers := m.peerSnapshot()
	heard := map[string]string{} // node id → fingerprint of its recorded inventory
	grpc := map[string]string{}  // node id → its catalog gRPC address
	m.fsm.Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			grpc[n.Id] = n.GrpcAddr
			var inv Inventory
			if len(n.Inventory) > 0 && json.Unmarshal(n.Inventory, &inv) == nil {
				heard[n.Id] = inv.Fingerprint()
			}
		}
	})
	var out []Route
	for _, id := range sortedIDs(peers) {
		p := peers[id]
		if id == m.cfg.NodeID || p.status != StatusAlive || p.meta.Draining {
			continue
		}
		addr := p.meta.GRPC
		if addr == "" {
			addr = grpc[id]
		}
		if addr == "" { // no Engine service to serve or ask
			continue
		}
		if fp, ok := heard[id]; !ok || p.meta.Inventory == "" || fp != p.meta.Inventory {
			out = append(out, Route{ID: id, GRPC: addr, HTTP: p.meta.HTTP})
		}
	}
	return out
}

// pipelineState sums up a sharded group: broken, failed, ready or loading
// (see PlacementInfo.State).
func pipelineState(p *pb.Placement, usable func(string) bool) string {
	state := "ready"
	for _, st := range p.Stages {
		switch {
		case !usable(st.Node):
			return "broken"
		case st.State == pb.StageState_STAGE_STATE_FAILED:
			state = "failed"
		case st.State != pb.StageState_STAGE_STATE_READY && state == "ready":
			state = "loading"
		}
	}
	return state
}

// Sharded reports whether model has a sharded placement: it is served only
// through its pipelines, never by loading a whole copy on a miss.
func (m *Member) Sharded(model string) bool {
	sharded := false
	m.fsm.Read(func(s *fsm.State) {
		for _, p := range s.Placements() {
			if p.Model == model && p.NumLayers > 0 {
				sharded = true
			}
		}
	})
	return sharded
}
