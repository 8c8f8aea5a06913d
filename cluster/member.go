package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/store"
)

// Peer states as seen by gossip.
const (
	StatusAlive  = "alive"
	StatusFailed = "failed"
	StatusLeft   = "left"
)

// peer is one node as gossip last reported it.
type peer struct {
	meta   Meta
	gossip string
	status string
	since  time.Time
}

// Member is a node's membership in the cluster: gossip (memberlist),
// consensus (raft over the FSM) and the Cluster gRPC service. Create it
// with New, register extra gRPC services on GRPCServer, then Start.
type Member struct {
	cfg  Config
	log  *slog.Logger
	auth *Auth

	fsm      *fsm.FSM
	stores   *store.Raft
	raft     *raft.Raft
	trans    *raft.NetworkTransport
	notifyCh chan bool
	hadState bool

	grpcSrv *grpc.Server
	grpcLn  net.Listener
	pool    *connPool

	ml       *memberlist.Memberlist
	gossipLn string // resolved gossip advertise address

	mu           sync.Mutex
	meta         Meta
	loadGossiped time.Time // when SetLoad last gossiped
	peers        map[string]*peer
	rtt          *rttTracker // round trips to peers from gossip probes

	reconcileCh chan struct{} // coalesced membership-change signal for the leader
	bootstrapCh chan struct{}
	readyTerm   atomic.Uint64 // the term whose leader barrier this node applied (0: none)

	startedAt time.Time
	unplaced  unplacedGroups // the planner's sharded groups without a placement (warned once)

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	closed  sync.Once
}

// New opens the raft stores and listeners and creates raft and the gRPC
// server; nothing talks to other nodes until Start.
func New(cfg Config) (_ *Member, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	m := &Member{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "cluster", "node", cfg.NodeID),
		auth:        NewAuth(cfg.Secret, cfg.SecretAccept...),
		fsm:         fsm.New(cfg.DedupSize),
		peers:       map[string]*peer{},
		rtt:         newRTTTracker(cfg.RTT),
		reconcileCh: make(chan struct{}, 1),
		bootstrapCh: make(chan struct{}, 1),
		notifyCh:    make(chan bool, 16),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	m.grpcLn, err = net.Listen("tcp", cfg.GRPCListen)
	if err != nil {
		return nil, fmt.Errorf("cluster: grpc listen: %w", err)
	}
	closers = append(closers, func() { m.grpcLn.Close() })
	raftLn, err := net.Listen("tcp", cfg.RaftListen)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft listen: %w", err)
	}
	closers = append(closers, func() { raftLn.Close() })
	raftAdv, err := advertise(cfg.RaftAdvertise, raftLn.Addr().String(), cfg.GossipAdvertise)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft: %w", err)
	}
	grpcAdv, err := advertise(cfg.GRPCAdvertise, m.grpcLn.Addr().String(), cfg.GossipAdvertise)
	if err != nil {
		return nil, fmt.Errorf("cluster: grpc: %w", err)
	}
	m.meta = Meta{ID: cfg.NodeID, HTTP: cfg.HTTPAdvertise, GRPC: grpcAdv, Raft: raftAdv,
		Role: cfg.Role, Version: cfg.Version, Backend: cfg.Backend, BootstrapExpect: cfg.BootstrapExpect}
	if _, err := m.meta.encode(); err != nil {
		return nil, err
	}

	m.stores, err = store.OpenRaft(filepath.Join(cfg.DataDir, "raft"), store.RaftOptions{SnapshotLog: slogWriter{m.log}})
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { m.stores.Close() })
	m.hadState, err = raft.HasExistingState(m.stores.Log, m.stores.Stable, m.stores.Snapshots)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft state: %w", err)
	}

	advAddr, err := net.ResolveTCPAddr("tcp", raftAdv)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft advertise %q: %w", raftAdv, err)
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Output: slogWriter{m.log}, Level: hclog.Warn})
	m.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &streamLayer{Listener: raftLn, advertise: advAddr, auth: m.auth, timeout: 2 * time.Second, blocked: cfg.blocked},
		MaxPool: 3, Timeout: 10 * time.Second, Logger: hl,
		// No pipelined replication. In hashicorp/raft v1.8 the pipeline's
		// channels are unbuffered at the default of 2 in flight: when a
		// follower answers with a newer term (or a failure), the decoder
		// returns, the send loop can still pick one more send, and that
		// send parks forever — the replication goroutine leaks, keeps its
		// heartbeats going, and raft.Shutdown waits for it, so a node
		// never exited on SIGTERM (the netns test, about 1 run in 3;
		// grafana/pyroscope#5518 found the same). raft's own analysis
		// (hashicorp/raft#541) shows pipelining buys little next to
		// batching.
		MaxRPCsInFlight: 1,
	})
	closers = append(closers, func() { m.trans.Close() })

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hl
	rc.NotifyCh = m.notifyCh
	// Half of hashicorp/raft's 1 s defaults (Consul's raft_multiplier
	// advice for production): a leader's death is noticed in 0.5–1 s, so
	// a new one is elected within the 3 s fusion promises. PreVote keeps
	// a slow node from disrupting a healthy leader.
	rc.HeartbeatTimeout = DefaultHeartbeatTimeout
	rc.ElectionTimeout = DefaultHeartbeatTimeout
	rc.LeaderLeaseTimeout = DefaultHeartbeatTimeout / 2
	t := cfg.Timing
	setDur(&rc.HeartbeatTimeout, t.HeartbeatTimeout)
	setDur(&rc.ElectionTimeout, t.ElectionTimeout)
	setDur(&rc.LeaderLeaseTimeout, t.LeaderLeaseTimeout)
	setDur(&rc.CommitTimeout, t.CommitTimeout)
	setDur(&rc.SnapshotInterval, t.SnapshotInterval)
	if t.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = t.SnapshotThreshold
		rc.TrailingLogs = t.SnapshotThreshold * 5 / 4
	}
	if t.TrailingLogs > 0 {
		rc.TrailingLogs = t.TrailingLogs
	}
	if err := m.recoverPeers(rc); err != nil {
		return nil, err
	}
	m.raft, err = raft.NewRaft(rc, m.fsm, m.stores.Log, m.stores.Stable, m.stores.Snapshots, m.trans)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft: %w", err)
	}

	m.grpcSrv = grpc.NewServer(append(append(ServerOptions(m.auth, cfg.ServerTLS), grpc.MaxRecvMsgSize(cfg.MaxCommandBytes+64<<10)), cfg.GRPCServerOptions...)...)
	pb.RegisterClusterServer(m.grpcSrv, &service{m: m})
	dialOpts := append(DialOptions(m.auth, cfg.ClientTLS), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(cfg.MaxCommandBytes+64<<10)))
	if cfg.blocked != nil {
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialFiltered(ctx, addr, 2*time.Second, cfg.blocked)
		}))
	}
	m.pool = newConnPool(dialOpts)
	return m, nil
}

// PeersFile, when present in <data-dir>/raft/, replaces the raft
// configuration at start (raft.RecoverCluster): the operator's way out
// when a majority of voters is lost for good. It holds a JSON array of
// {"id", "address", "non_voter"} and is renamed to peers.json.applied
// once used. Write the same file on every surviving node.
const PeersFile = "peers.json"

func (m *Member) recoverPeers(rc *raft.Config) error {
	path := filepath.Join(m.stores.Dir, PeersFile)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return fmt.Errorf("cluster: %s: %w", path, err)
	}
	if err := raft.RecoverCluster(rc, m.fsm, m.stores.Log, m.stores.Stable, m.stores.Snapshots, m.trans, conf); err != nil {
		return fmt.Errorf("cluster: recover from %s: %w", path, err)
	}
	if err := os.Rename(path, path+".applied"); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	m.hadState = true
	m.log.Warn("raft configuration replaced from "+PeersFile, "servers", len(conf.Servers))
	return nil
}

func setDur(dst *time.Duration, v time.Duration) {
	if v > 0 {
		*dst = v
	}
}

// advertise picks the address others use: the explicit one, else the
// listener's, with an unspecified host replaced by the gossip advertise host.
func advertise(explicit, listen, gossipAdv string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return listen, nil
	}
	if gossipAdv != "" {
		if h, _, err := net.SplitHostPort(gossipAdv); err == nil && h != "" {
			return net.JoinHostPort(h, port), nil
		}
	}
	ip, err := privateIP()
	if err != nil {
		return "", fmt.Errorf("listening on %s: set an advertise address (%w)", listen, err)
	}
	return net.JoinHostPort(ip, port), nil
}

func privateIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsPrivate() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("no private address found")
}

// GRPCServer is the node's inter-node gRPC server, with the cluster's auth
// interceptors; register other services (Engine) on it before Start.
func (m *Member) GRPCServer() *grpc.Server { return m.grpcSrv }

// DialOptions are the options to call another node's gRPC server.
func (m *Member) DialOptions() []grpc.DialOption { return DialOptions(m.auth, m.cfg.ClientTLS) }

// FSM gives local (stale) reads of the replicated state and change
// subscriptions.
func (m *Member) FSM() *fsm.FSM { return m.fsm }

// ID is this node's id.
func (m *Member) ID() string { return m.cfg.NodeID }

// Start serves gRPC, joins gossip and starts the bootstrap and leadership
// loops. It returns once gossip is up (joining seeds is retried in the
// background).
func (m *Member) Start(ctx context.Context) error {
	if m.started {
		return errors.New("cluster: already started")
	}
	m.started = true
	m.startedAt = time.Now()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := m.grpcSrv.Serve(m.grpcLn); err != nil {
			m.log.Error("grpc server stopped", "err", err)
		}
	}()

	mc := memberlist.DefaultLANConfig()
	mc.Name = m.cfg.NodeID
	host, port, err := net.SplitHostPort(m.cfg.GossipListen)
	if err != nil {
		return fmt.Errorf("cluster: gossip listen %q: %w", m.cfg.GossipListen, err)
	}
	mc.BindAddr = host
	mc.BindPort, _ = strconv.Atoi(port)
	mc.AdvertisePort = mc.BindPort
	if m.cfg.GossipAdvertise != "" {
		ah, ap, err := net.SplitHostPort(m.cfg.GossipAdvertise)
		if err != nil {
			return fmt.Errorf("cluster: gossip advertise %q: %w", m.cfg.GossipAdvertise, err)
		}
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	if mc.Keyring, err = m.auth.GossipKeyring(); err != nil {
		return fmt.Errorf("cluster: gossip keyring: %w", err)
	}
	mc.Delegate = &delegate{m: m}
	mc.Events = &events{m: m}
	mc.Ping = pingDelegate{m.rtt}
	mc.Logger = slog.NewLogLogger(m.log.With("component", "memberlist").Handler(), slog.LevelDebug)
	t := m.cfg.Timing
	setDur(&mc.ProbeInterval, t.ProbeInterval)
	setDur(&mc.ProbeTimeout, t.ProbeTimeout)
	setDur(&mc.GossipInterval, t.GossipInterval)
	setDur(&mc.PushPullInterval, t.PushPullInterval)
	setDur(&mc.DeadNodeReclaimTime, t.DeadNodeReclaimTime)
	if mc.DeadNodeReclaimTime == 0 {
		mc.DeadNodeReclaimTime = 30 * time.Second
	}
	if t.SuspicionMult > 0 {
		mc.SuspicionMult = t.SuspicionMult
	}
	m.ml, err = memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("cluster: gossip: %w", err)
	}
	m.gossipLn = m.ml.LocalNode().Address()

	m.wg.Add(3)
	go func() { defer m.wg.Done(); m.joinLoop() }()
	go func() { defer m.wg.Done(); m.bootstrapLoop() }()
	go func() { defer m.wg.Done(); m.monitorLeadership() }()
	return nil
}

// GossipAddr is the address other nodes can --join.
func (m *Member) GossipAddr() string { return m.gossipLn }

// RaftAddr is the advertised raft address.
func (m *Member) RaftAddr() string { return m.selfMeta().Raft }

// GRPCAddr is the advertised gRPC address.
func (m *Member) GRPCAddr() string { return m.selfMeta().GRPC }

func (m *Member) selfMeta() Meta {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.meta
}

func (m *Member) joinLoop() {
	if len(m.cfg.Join) == 0 {
		return
	}
	backoff := 100 * time.Millisecond
	for {
		n, err := m.ml.Join(m.cfg.Join)
		if n > 0 {
			m.log.Info("joined the cluster", "contacted", n)
			return
		}
		m.log.Warn("join failed, retrying", "seeds", m.cfg.Join, "err", err)
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// Close stops the node abruptly (as a crash would, minus the lost disk
// writes): no gossip leave, no leadership transfer.
func (m *Member) Close() error {
	var err error
	m.closed.Do(func() {
		m.cancel()
		err = m.raft.Shutdown().Error()
		if m.ml != nil {
			_ = m.ml.Shutdown()
		}
		m.grpcSrv.Stop()
		if !m.started {
			m.grpcLn.Close() // Stop closes only listeners it served
		}
		m.wg.Wait()
		m.pool.close()
		_ = m.trans.Close()
		if cerr := m.stores.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// Leave leaves gracefully: marks the node draining, hands leadership
// over, tells gossip it is leaving (the leader then removes it from raft
// and the catalog), waits LeaveDelay for that to spread, and closes.
//
// A member already closed (a crash-like Close) has nothing to leave:
// Leave returns nil (memberlist panics on a leave after shutdown).
func (m *Member) Leave(ctx context.Context) error {
	if m.ctx.Err() != nil {
		return nil
	}
	m.mu.Lock()
	m.meta.Leaving = true
	m.mu.Unlock()
	// Bounded: without a quorum (the last nodes of a cluster stopping)
	// the catalog write cannot commit, and leaving must not wait for it.
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := m.SetDraining(dctx, true)
	cancel()
	if err != nil {
		m.log.Warn("leave: set draining", "err", err)
	}
	if m.raft.State() == raft.Leader && len(m.voters()) > 1 {
		if err := m.raft.LeadershipTransfer().Error(); err != nil {
			m.log.Warn("leave: leadership transfer", "err", err)
		}
	}
	if m.ml != nil {
		if err := m.ml.Leave(m.cfg.LeaveDelay); err != nil {
			m.log.Warn("leave: gossip", "err", err)
		}
	}
	select {
	case <-time.After(m.cfg.LeaveDelay):
	case <-ctx.Done():
	}
	return m.Close()
}

// LoadGossipInterval is the most often SetLoad gossips a change.
const LoadGossipInterval = time.Second

// SetLoad gossips this node's load (generations in flight) when it
// changed, at most every LoadGossipInterval; it never blocks on the
// leader.
func (m *Member) SetLoad(load int64) {
	m.mu.Lock()
	if m.meta.Load == load || time.Since(m.loadGossiped) < LoadGossipInterval {
		m.mu.Unlock()
		return
	}
	m.meta.Load = load
	m.loadGossiped = time.Now()
	m.mu.Unlock()
	if m.ml != nil {
		if err := m.ml.UpdateNode(m.cfg.ApplyTimeout); err != nil {
			m.log.Debug("gossip load update", "err", err)
		}
	}
}

// SetDraining gossips and records the draining flag.
func (m *Member) SetDraining(ctx context.Context, draining bool) error {
	m.mu.Lock()
	m.meta.Draining = draining
	m.mu.Unlock()
	if m.ml != nil {
		if err := m.ml.UpdateNode(m.cfg.ApplyTimeout); err != nil {
			m.log.Warn("gossip meta update", "err", err)
		}
	}
	_, err := m.Apply(ctx, &pb.NodeSetDraining{Id: m.cfg.NodeID, Draining: draining})
	return err
}

func (m *Member) voters() []raft.Server {
	f := m.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			out = append(out, s)
		}
	}
	return out
}

// Leader returns the current leader's id ("" when unknown).
func (m *Member) Leader() string {
	_, id := m.raft.LeaderWithID()
	return string(id)
}

// IsLeader reports whether this node leads.
func (m *Member) IsLeader() bool { return m.raft.State() == raft.Leader }

// ---- gossip delegates ----

type delegate struct{ m *Member }

func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	meta := d.m.meta
	d.m.mu.Unlock()
	b, err := meta.encode()
	if err != nil || len(b) > limit {
		d.m.log.Error("node metadata too large", "err", err)
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

type events struct{ m *Member }

func (e *events) NotifyJoin(n *memberlist.Node)   { e.m.observe(n, StatusAlive) }
func (e *events) NotifyUpdate(n *memberlist.Node) { e.m.observe(n, StatusAlive) }

// NotifyLeave cannot tell a leave from a death: memberlist v0.7 passes
// the node before its state is updated. A node that leaves gracefully
// gossips Leaving first.
func (e *events) NotifyLeave(n *memberlist.Node) {
	e.m.mu.Lock()
	p := e.m.peers[n.Name]
	leaving := p != nil && p.meta.Leaving
	e.m.mu.Unlock()
	if n.State == memberlist.StateLeft || leaving {
		e.m.observe(n, StatusLeft)
		return
	}
	e.m.observe(n, StatusFailed)
}

func (m *Member) observe(n *memberlist.Node, status string) {
	meta, ok := decodeMeta(n.Meta)
	if !ok {
		meta = Meta{ID: n.Name}
	}
	m.mu.Lock()
	p := m.peers[n.Name]
	if p == nil || p.status != status {
		p = &peer{since: time.Now()}
		m.peers[n.Name] = p
	}
	p.status = status
	p.gossip = n.Address()
	if ok {
		p.meta = meta
	} else if p.meta.ID == "" {
		p.meta = meta
	}
	m.mu.Unlock()
	if status != StatusAlive {
		m.rtt.forget(n.Name)
	}
	m.log.Debug("member", "id", n.Name, "status", status)
	for _, ch := range []chan struct{}{m.reconcileCh, m.bootstrapCh} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (m *Member) peerSnapshot() map[string]peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]peer, len(m.peers))
	for k, v := range m.peers {
		out[k] = *v
	}
	return out
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for k := range m {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	return ids
}

// slogWriter adapts line-oriented library logs to slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(trimNL(p))
	level := slog.LevelDebug
	switch {
	case strings.Contains(msg, "[ERROR]"), strings.Contains(msg, "[ERR]"):
		level = slog.LevelError
	case strings.Contains(msg, "[WARN]"):
		level = slog.LevelWarn
	}
	w.l.Log(context.Background(), level, msg)
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}

var _ io.Writer = slogWriter{}
