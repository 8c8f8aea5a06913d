package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"fusion/cluster"
	"fusion/cluster/adminremote"
	"fusion/cluster/clusterpb"
	"fusion/cluster/enginepb"
	"fusion/cluster/fsm"
	"fusion/cluster/layersplit"
	"fusion/cluster/mcpremote"
	"fusion/cluster/remote"
	"fusion/engine"
	"fusion/engine/runner"
	"fusion/router/dispatch"
)

// ClusterConfig makes the node a cluster member. The node joins a cluster
// when Join, BootstrapExpect or Listen is set; with none, it runs alone
// exactly as before (no gossip, no raft).
type ClusterConfig struct {
	NodeID          string   // default: the hostname
	Join            []string // gossip seeds host:port
	Listen          string   // gossip TCP+UDP (default 0.0.0.0:7946)
	Advertise       string   // host[:port] others reach this node on
	RaftListen      string   // default: Listen's host, port+1 (0 stays 0)
	GRPCListen      string   // default: Listen's host, port+2 (0 stays 0)
	BootstrapExpect int      // form the first cluster once this many nodes are up
	Voters          int      // raft voters the leader keeps: 3 (default) or 5
	Secret          string   // encrypts gossip, authenticates raft and gRPC
	// SecretAccept are secrets also accepted from other nodes (a rotation
	// in progress; this node sends Secret's credentials only).
	SecretAccept []string
	// Insecure lets the cluster listeners bind beyond loopback without a
	// Secret (cluster.ErrExposed otherwise).
	Insecure bool
	// ServerTLS and ClientTLS run inter-node gRPC over TLS (both or
	// neither; see fusion serve --grpc-tls-*).
	ServerTLS, ClientTLS *tls.Config
	Timing               cluster.Timing
	// RTT sets how the member publishes its measured round trips to its
	// peers and the planner's cost of an unmeasured hop.
	RTT cluster.RTTConfig
	// HoldInventory, when set, is asked before each inventory report;
	// while it returns true the report waits (the rest of the sync loop
	// goes on). A test hook: it lets a test keep a member's inventory
	// from its peers for exactly as long as it needs.
	HoldInventory func() bool
}

// Enabled reports whether any cluster setting is given.
func (c ClusterConfig) Enabled() bool {
	return len(c.Join) > 0 || c.BootstrapExpect > 0 || c.Listen != ""
}

// Listeners are the gossip, Raft and gRPC addresses the member binds: the
// settings, or their defaults (gossip DefaultClusterListen, Raft and gRPC
// on its host at port+1 and port+2).
func (c ClusterConfig) Listeners() (gossip, raft, grpc string, err error) {
	gossip, raft, grpc = c.Listen, c.RaftListen, c.GRPCListen
	if gossip == "" {
		gossip = DefaultClusterListen
	}
	if raft == "" {
		if raft, err = offsetPort(gossip, 1); err != nil {
			return "", "", "", fmt.Errorf("node: cluster listen %q: %w", gossip, err)
		}
	}
	if grpc == "" {
		if grpc, err = offsetPort(gossip, 2); err != nil {
			return "", "", "", fmt.Errorf("node: cluster listen %q: %w", gossip, err)
		}
	}
	return gossip, raft, grpc, nil
}

// DefaultClusterListen is the gossip address when clustering is on.
const DefaultClusterListen = "0.0.0.0:7946"

// offsetPort returns addr's host with port+delta (port 0 stays 0).
func offsetPort(addr string, delta int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("port %q: %w", port, err)
	}
	if p != 0 {
		p += delta
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// newMember builds the cluster member; httpAddr is where the API listens.
func (n *Node) newMember(httpAddr string) (*cluster.Member, error) {
	cc := n.cfg.Cluster
	if n.cfg.DataDir == "" {
		return nil, errors.New("node: a cluster member needs a data dir")
	}
	id := cc.NodeID
	if id == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node: node id: %w", err)
		}
		id = h
	}
	listen, raftListen, grpcListen, err := cc.Listeners()
	if err != nil {
		return nil, err
	}
	gossipAdv := cc.Advertise
	if gossipAdv != "" {
		if _, _, err := net.SplitHostPort(gossipAdv); err != nil {
			_, port, _ := net.SplitHostPort(listen)
			gossipAdv = net.JoinHostPort(gossipAdv, port)
		}
	}
	scheme := "http://"
	if n.cert != nil {
		scheme = "https://"
	}
	return cluster.New(cluster.Config{
		NodeID: id, DataDir: n.cfg.DataDir,
		GossipListen: listen, GossipAdvertise: gossipAdv, RaftListen: raftListen, GRPCListen: grpcListen,
		HTTPAdvertise: scheme + advertiseHTTP(httpAddr, gossipAdv),
		Join:          cc.Join, BootstrapExpect: cc.BootstrapExpect, Voters: cc.Voters, Secret: cc.Secret, SecretAccept: cc.SecretAccept, Insecure: cc.Insecure,
		ServerTLS: cc.ServerTLS, ClientTLS: cc.ClientTLS, GRPCServerOptions: n.tracer.ServerOptions(),
		Role: "server", Version: n.cfg.Version, Backend: n.runner.BackendStatus().Name, Timing: cc.Timing, Logger: n.cfg.Logger,
		RTT: cc.RTT,
	})
}

// advertiseHTTP replaces an unspecified listen host with the advertised one.
func advertiseHTTP(listen, adv string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return listen
	}
	if h, _, err := net.SplitHostPort(adv); err == nil && h != "" {
		return net.JoinHostPort(h, port)
	}
	return listen
}

// Cluster is the node's cluster member (nil when it runs alone).
func (n *Node) Cluster() *cluster.Member { return n.member }

// DispatchStats are the cluster dispatcher's counters: generations served
// here and forwarded, attempts retried on another node, requests refused
// (zero when the node runs alone).
func (n *Node) DispatchStats() dispatch.Stats {
	if n.dispatcher == nil {
		return dispatch.Stats{}
	}
	return n.dispatcher.Stats()
}

// clusterStatus serves GET /admin/api/cluster once the member exists.
func (n *Node) clusterStatus() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.member == nil {
			http.Error(w, "cluster not started", http.StatusServiceUnavailable)
			return
		}
		n.member.AdminHandler().ServeHTTP(w, r)
	})
}

// markDraining tells the cluster to stop routing new work here.
func (n *Node) markDraining(ctx context.Context) {
	if n.member == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := n.member.SetDraining(ctx, true); err != nil {
		n.cfg.Logger.Warn("cluster: mark draining", "err", err)
	}
}

// leaveCluster marks the node draining, then leaves gracefully.
func (n *Node) leaveCluster(ctx context.Context) error {
	if n.member == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return n.member.Leave(ctx)
}

// soloID is a lone node's id for X-Fusion-Node: the configured one, else
// the hostname.
func soloID(id string) string {
	if id != "" {
		return id
	}
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "fusion"
}

// imageNodeID is the node id url results of image generations carry: the
// member's in a cluster (its peers fetch them from here), none alone.
func (n *Node) imageNodeID() string {
	if n.member == nil {
		return ""
	}
	return n.member.ID()
}

// joinCluster builds the member and the data plane over it: the runner
// behind the Engine gRPC service (registered on the member's server, so
// it shares its auth and TLS), a client pool and load follower for peers,
// and the dispatcher the router uses as its engine.
func (n *Node) joinCluster() error {
	m, err := n.newMember(n.server.Addr())
	if err != nil {
		return err
	}
	n.member = m
	enginepb.RegisterEngineServer(m.GRPCServer(), remote.NewService(remote.ServerConfig{
		NodeID: m.ID(), Engine: n.runner, Stats: n.peerStats, Logger: n.cfg.Logger, ImageFiles: n.imageFiles,
	}))
	// Every member serves its MCP servers to its peers (maybe none), so a
	// stdio server configured on one node runs calls from any node.
	mcpremote.Register(m.GRPCServer(), n.mcp)
	// Every member answers its peers' admin calls (stats, models, logs of
	// this node) once its router exists.
	adminremote.Register(m.GRPCServer(), func() adminremote.Local {
		if n.admin.handler.Load() == nil {
			return nil
		}
		return adminLocal{n: n}
	})
	n.registerKeyUsage()
	n.registerPipeline()
	n.pool = remote.NewPool(append(m.DialOptions(), n.tracer.DialOptions()...)...)
	n.loads = remote.NewLoads(n.pool, 0)
	n.dispatcher = dispatch.New(dispatch.Config{
		Local: n.runner, Table: &clusterTable{m: m, loads: n.loads}, Connect: n.pool, Logger: n.cfg.Logger,
	})
	return nil
}

// clusterMCP is the router's MCP host in a cluster: this node's servers
// and its live peers'.
func (n *Node) clusterMCP() *mcpremote.Cluster {
	c := &mcpremote.Cluster{
		Self: n.member.ID(),
		Peers: func() []mcpremote.Peer {
			var out []mcpremote.Peer
			for _, p := range n.member.Members() {
				if p.ID != n.member.ID() && p.GRPC != "" && p.Status == cluster.StatusAlive {
					out = append(out, mcpremote.Peer{ID: p.ID, Addr: p.GRPC})
				}
			}
			return out
		},
		Conn:  n.peerConn,
		Local: n.mcp,
	}
	return c
}

// peerStats are this node's live figures for its peers' dispatchers;
// tokens/s is the rate since the previous call (one per stats tick).
func (n *Node) peerStats() remote.Stats {
	s := n.runner.Stats()
	out := remote.Stats{InFlight: s.InFlight, Queued: s.Waiting, KVBytes: s.KVBytes, FreeMemoryBytes: n.runner.MemoryFree()}
	n.rateMu.Lock()
	defer n.rateMu.Unlock()
	now := time.Now()
	if !n.rateAt.IsZero() {
		if dt := now.Sub(n.rateAt).Seconds(); dt > 0 {
			out.TokensPerSecond = float64(s.Generated-n.rateTokens) / dt
		}
	}
	n.rateAt, n.rateTokens = now, s.Generated
	return out
}

// stopCluster ends the cluster side in order: the session store's watch,
// the sync loop, a graceful leave, then the peers' clients.
func (n *Node) stopCluster(ctx context.Context) error {
	if n.member == nil {
		return nil
	}
	if n.sessions != nil {
		n.sessions.Close()
	}
	if n.stopUsage != nil {
		n.stopUsage()
		n.usageWG.Wait()
	}
	if n.keys != nil {
		n.keys.Close()
	}
	if n.stopSync != nil {
		n.stopSync()
		<-n.syncDone
	}
	err := n.leaveCluster(ctx)
	n.loads.Close()
	n.closeStages()
	return errors.Join(err, n.pool.Close())
}

// syncInterval is how often a member reports its models and follows its
// peers and assignments (each report is skipped when nothing changed).
const syncInterval = 500 * time.Millisecond

// startSync runs the loop that keeps the cluster's view of this node
// current: its inventory (models on disk and loaded, memory) through the
// log, a stats stream from every peer for the dispatcher's load figures,
// and the models the placement planner assigned here loaded and reported.
func (n *Node) startSync() {
	ctx, cancel := context.WithCancel(context.Background())
	n.stopSync, n.syncDone = cancel, make(chan struct{})
	go func() {
		defer close(n.syncDone)
		t := time.NewTicker(syncInterval)
		defer t.Stop()
		watched, gone := map[string]bool{}, map[string]time.Time{}
		for {
			n.syncOnce(ctx, watched, gone)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// peerClientGrace is how long the client of a peer gossip calls failed
// is kept before it is closed: closing it ends the requests in flight on
// it, and a peer briefly taken for failed (a loaded machine missing its
// probes) comes back within seconds, its connection still good.
const peerClientGrace = 30 * time.Second

func (n *Node) syncOnce(ctx context.Context, watched map[string]bool, gone map[string]time.Time) {
	m := n.member
	// This node's load, gossiped coarsely for the placement planner.
	m.SetLoad(n.runner.Stats().InFlight)
	// Peers' loads: follow the live ones, forget the gone.
	live := map[string]bool{}
	for _, p := range m.Members() {
		if p.ID != m.ID() && p.GRPC != "" && p.Status == cluster.StatusAlive {
			live[p.GRPC] = true
		}
	}
	for addr := range live {
		if !watched[addr] {
			n.loads.Watch(addr)
			watched[addr] = true
		}
	}
	now := time.Now()
	for addr := range watched {
		if !live[addr] {
			n.loads.Forget(addr)
			delete(watched, addr)
			gone[addr] = now
		}
	}
	for addr, since := range gone {
		switch {
		case live[addr]:
			delete(gone, addr)
		case now.Sub(since) > peerClientGrace:
			n.pool.Forget(addr)
			delete(gone, addr)
		}
	}
	// Assignments of the planner: load, then report ready (or failed).
	for _, p := range m.Assignments() {
		if p.NumLayers > 0 {
			continue // a pipeline: syncStages
		}
		for _, st := range p.Stages {
			if st.Node != m.ID() || st.State != clusterpb.StageState_STAGE_STATE_ASSIGNED {
				continue
			}
			state := clusterpb.StageState_STAGE_STATE_READY
			if err := n.runner.Load(ctx, p.Model); err != nil {
				n.cfg.Logger.Warn("cluster: assigned model failed to load", "model", p.Model, "err", err)
				state = clusterpb.StageState_STAGE_STATE_FAILED
			}
			if err := m.ReportStage(ctx, p.Model, p.Replica, p.Generation, state); err != nil && ctx.Err() == nil {
				n.cfg.Logger.Debug("cluster: report stage", "model", p.Model, "err", err)
			}
		}
	}
	n.syncStages(ctx)
	// Inventory: what this node has on disk and loaded.
	if hold := n.cfg.Cluster.HoldInventory; hold != nil && hold() {
		return
	}
	bs := n.runner.BackendStatus()
	inv := cluster.Inventory{MemoryTotal: n.runner.MemoryTotal(), Backend: bs.Name}
	for model, be := range bs.Models {
		if be != bs.Name {
			if inv.ModelBackends == nil {
				inv.ModelBackends = map[string]string{}
			}
			inv.ModelBackends[model] = be
		}
	}
	// Free memory changes all the time; the inventory goes through the
	// log, so it carries it rounded to 256 MiB.
	inv.MemoryFree = n.runner.MemoryFree() &^ (256<<20 - 1)
	inv.MemoryBudget = n.runner.MemoryBudget()
	if n.shapes == nil {
		n.shapes = map[string]modelShape{}
	}
	for _, s := range n.runner.List() {
		inv.ModelsOnDisk = append(inv.ModelsOnDisk, s.ID)
		need := n.runner.ModelNeed(s.ID)
		sh, ok := n.shapes[s.ID]
		if !ok || sh.need != need {
			// Read again when the need moved: the costs carry the KV at
			// the context, which the model's settings may have capped.
			sh = modelShape{layers: n.runner.NumLayers(s.ID), head: n.runner.HeadLayers(s.ID), maxCut: n.runner.MaxCut(s.ID), need: need}
			if sc, ok := n.runner.StageCosts(s.ID); ok {
				sh.costs = layersplit.Costs{Bytes: sc.Bytes, First: sc.First, Last: sc.Last, Compute: sc.Compute}
			}
			n.shapes[s.ID] = sh
		}
		if sh.layers > 0 {
			if inv.Layers == nil {
				inv.Layers, inv.HeadLayers = map[string]int{}, map[string]float64{}
			}
			inv.Layers[s.ID], inv.HeadLayers[s.ID] = sh.layers, sh.head
			if sh.maxCut > 0 && sh.maxCut < sh.layers {
				if inv.MaxCut == nil {
					inv.MaxCut = map[string]int{}
				}
				inv.MaxCut[s.ID] = sh.maxCut
			}
			if len(sh.costs.Bytes) == sh.layers {
				if inv.Costs == nil {
					inv.Costs = map[string]layersplit.Costs{}
				}
				inv.Costs[s.ID] = sh.costs
			}
		}
		if need > 0 {
			if inv.ModelBytes == nil {
				inv.ModelBytes = map[string]int64{}
			}
			inv.ModelBytes[s.ID] = need
		}
		if s.State == runner.StateReady || s.State == runner.StateIdle {
			inv.ModelsLoaded = append(inv.ModelsLoaded, s.ID)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := m.SetInventory(rctx, inv); err != nil && ctx.Err() == nil {
		n.cfg.Logger.Debug("cluster: inventory not recorded yet", "err", err)
	}
}

// clusterTable is the dispatcher's routing table over the member: ready
// nodes from the replicated state filtered by gossip liveness, loads from
// the peers' stats streams. It reads only local state.
type clusterTable struct {
	m     *cluster.Member
	loads *remote.Loads
}

func (t *clusterTable) Self() string { return t.m.ID() }

// Candidates are the nodes with model loaded; when none has it loaded,
// the live nodes with it on disk (the one picked loads it on demand, and
// the next requests find it ready there) — unless no node's memory budget
// holds it whole: then none, and the miss is the dispatcher's (Unfit).
func (t *clusterTable) Candidates(model string) []dispatch.Peer {
	routes, known := t.m.Routes(model)
	out := make([]dispatch.Peer, 0, len(routes))
	for _, r := range routes {
		out = append(out, dispatch.Peer{ID: r.ID, Addr: r.GRPC, Alive: true, Load: t.loads.Load(r.GRPC)})
	}
	if len(out) > 0 || !known || t.m.Sharded(model) {
		return out // a sharded model is served by its pipelines only
	}
	if k, err := t.m.Fit(model); err != nil || k >= 2 {
		return nil
	}
	return t.Holders(model)
}

// Holders are the live nodes, not draining, with model on disk (which
// includes those that have it loaded).
func (t *clusterTable) Holders(model string) []dispatch.Peer {
	var out []dispatch.Peer
	onDisk := map[string]bool{}
	t.m.FSM().Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			var inv cluster.Inventory
			if json.Unmarshal(n.Inventory, &inv) == nil && slices.Contains(inv.ModelsOnDisk, model) {
				onDisk[n.Id] = true
			}
		}
	})
	for _, p := range t.m.Members() {
		if onDisk[p.ID] && p.GRPC != "" && p.Status == cluster.StatusAlive && !p.Draining {
			out = append(out, dispatch.Peer{ID: p.ID, Addr: p.GRPC, Alive: true, Load: t.loads.Load(p.GRPC)})
		}
	}
	return out
}

// Backend is the compute backend node runs model on, from its replicated
// inventory, else the backend it gossips ("" when neither says).
func (t *clusterTable) Backend(node, model string) string {
	var be string
	t.m.FSM().Read(func(s *fsm.State) {
		for _, n := range s.Nodes() {
			var inv cluster.Inventory
			if n.Id == node && json.Unmarshal(n.Inventory, &inv) == nil {
				be = inv.BackendOf(model)
			}
		}
	})
	if be != "" {
		return be
	}
	for _, p := range t.m.Members() {
		if p.ID == node {
			return p.Backend
		}
	}
	return ""
}

// PlacedOnly: a sharded model never loads whole on a miss.
func (t *clusterTable) PlacedOnly(model string) bool { return t.m.Sharded(model) }

// Unfit refuses a model no node can take whole: one the live nodes' memory
// budgets cannot hold even together (insufficient memory, naming the need
// and the total), or one that needs a pipeline and has no placement
// setting yet — it gets {"replicas":1}, so the planner shards it, and the
// request is told to retry.
func (t *clusterTable) Unfit(model string) error {
	k, err := t.m.Fit(model)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v", engine.ErrUnavailable, err)
	case k < 2 || t.m.Sharded(model):
		return nil
	}
	if _, ok := t.m.PlacementSpecOf(model); !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.m.SetPlacementSpec(ctx, model, cluster.PlacementSpec{Replicas: 1}); err != nil {
			return fmt.Errorf("%w: %q fits no node whole and needs a pipeline of %d stages; placing it failed: %v", engine.ErrUnavailable, model, k, err)
		}
	}
	return fmt.Errorf("%w: %q fits no node whole: it is being sharded across %d nodes", engine.ErrUnavailable, model, k)
}

func (t *clusterTable) Known(model string) bool {
	_, known := t.m.Routes(model)
	return known
}

func (t *clusterTable) Unheard() []dispatch.Peer {
	var out []dispatch.Peer
	for _, r := range t.m.Unheard() {
		out = append(out, dispatch.Peer{ID: r.ID, Addr: r.GRPC, Alive: true, Load: t.loads.Load(r.GRPC)})
	}
	return out
}

func (t *clusterTable) Peers() []dispatch.Peer {
	var out []dispatch.Peer
	for _, p := range t.m.Members() {
		if p.ID == t.m.ID() || p.GRPC == "" {
			continue
		}
		out = append(out, dispatch.Peer{ID: p.ID, Addr: p.GRPC, Alive: p.Status == cluster.StatusAlive, Draining: p.Draining, Load: t.loads.Load(p.GRPC)})
	}
	return out
}

// modelShape is what the inventory says of a model's layers: their number
// and its output head counted in layers (runner.NumLayers, HeadLayers).
type modelShape struct {
	layers int
	head   float64
	maxCut int              // runner.MaxCut
	costs  layersplit.Costs // runner.StageCosts
	need   int64            // runner.ModelNeed when it was read
}
