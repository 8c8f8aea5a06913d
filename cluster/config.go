package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// DefaultMaxCommandBytes bounds one raft command (a session's turn with
// its messages is the largest).
const DefaultMaxCommandBytes = 4 << 20

// DefaultHoldTimeout is how long a write is retried without a leader
// before it fails with ErrNoLeader (Config.HoldTimeout when zero).
const DefaultHoldTimeout = 5 * time.Second

// DefaultHeartbeatTimeout is the raft heartbeat and election timeout when
// Timing leaves them zero (the leader lease is half of it).
const DefaultHeartbeatTimeout = 500 * time.Millisecond

// Timing holds the failure-detection and consensus timings. Zero fields
// take DefaultHeartbeatTimeout for raft's heartbeat/election (lease: half),
// else hashicorp/raft and memberlist LAN defaults.
type Timing struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	TrailingLogs       uint64

	ProbeInterval    time.Duration
	ProbeTimeout     time.Duration
	GossipInterval   time.Duration
	PushPullInterval time.Duration
	SuspicionMult    int
	// DeadNodeReclaimTime lets a dead node's id come back on a new
	// address after this long (memberlist refuses it by default).
	DeadNodeReclaimTime time.Duration
	// GossipSettle is how long after start a leader waits before marking
	// catalog nodes that gossip has not reported as failed (5 s).
	GossipSettle time.Duration
}

// TestTiming is a fast profile for in-process clusters on loopback.
func TestTiming() Timing {
	return Timing{
		HeartbeatTimeout:    200 * time.Millisecond,
		ElectionTimeout:     200 * time.Millisecond,
		LeaderLeaseTimeout:  150 * time.Millisecond,
		CommitTimeout:       10 * time.Millisecond,
		ProbeInterval:       200 * time.Millisecond,
		ProbeTimeout:        100 * time.Millisecond,
		GossipInterval:      50 * time.Millisecond,
		PushPullInterval:    2 * time.Second,
		SuspicionMult:       2,
		DeadNodeReclaimTime: 100 * time.Millisecond,
		GossipSettle:        500 * time.Millisecond,
	}
}

// Config configures one node's cluster member.
type Config struct {
	NodeID  string // required, unique in the cluster
	DataDir string // raft state goes to DataDir/raft

	GossipListen    string // memberlist TCP+UDP, host:port (port 0: any)
	GossipAdvertise string // host:port others reach it on (default: the listener's)
	RaftListen      string // raft transport, host:port
	RaftAdvertise   string
	GRPCListen      string // Cluster (and Engine) gRPC, host:port
	GRPCAdvertise   string
	HTTPAdvertise   string // the node's HTTP API, gossiped for operators and proxies

	Join            []string // gossip seeds
	BootstrapExpect int      // form the first cluster when this many nodes are up

	// Secret, when set, encrypts gossip, authenticates raft connections and
	// gRPC calls. Every node must use the same secret.
	Secret string
	// SecretAccept are more secrets whose credentials are accepted from
	// other nodes (never sent): a secret rotation in progress.
	SecretAccept []string
	// Insecure lets the cluster listeners bind beyond loopback without a
	// secret (anyone reaching the ports could join and write).
	Insecure  bool
	ServerTLS *tls.Config // gRPC server TLS (optional)
	ClientTLS *tls.Config // gRPC client TLS (optional)
	// GRPCServerOptions are added to the member's gRPC server's (e.g. the
	// tracing interceptors, chained after the cluster's auth).
	GRPCServerOptions []grpc.ServerOption

	Role    string
	Version string
	Backend string // compute backend of the node's models, gossiped (mlx, cpu)

	Voters            int           // raft voters kept (3 when 0)
	DedupSize         int           // request ids remembered (fsm.DefaultDedupSize when 0; same on all nodes)
	ReconcileInterval time.Duration // periodic leader reconcile (60 s)
	ReapInterval      time.Duration // session expiry sweep on the leader (1 s)
	DeadServerGrace   time.Duration // a failed raft server is removed after this (2 min)
	ApplyTimeout      time.Duration // one raft Apply or forwarded call (5 s)
	HoldTimeout       time.Duration // retry a write this long without a leader (5 s)
	LeaveDelay        time.Duration // wait after a graceful leave for it to spread (1 s)
	MaxCommandBytes   int           // largest command accepted for the log (4 MiB)
	PlanInterval      time.Duration // placement planner period on the leader (2 s)
	FailoverGrace     time.Duration // a failed node's replicas move after this (2 min)
	// RTT sets how this node publishes its measured round trips to its
	// peers and what the planner counts for a hop nobody measured.
	RTT RTTConfig

	Timing Timing
	Logger *slog.Logger

	// blocked, a test hook, cuts raft and gRPC traffic to the addresses
	// it returns true for (in-process partitions).
	blocked func(addr string) bool
}

func (c *Config) defaults() error {
	if c.NodeID == "" {
		return errors.New("cluster: a node id is required")
	}
	if c.DataDir == "" {
		return errors.New("cluster: a data dir is required")
	}
	if c.GossipListen == "" {
		c.GossipListen = "0.0.0.0:7946"
	}
	if c.RaftListen == "" {
		c.RaftListen = "0.0.0.0:7947"
	}
	if c.GRPCListen == "" {
		c.GRPCListen = "0.0.0.0:7948"
	}
	if err := c.checkExposure(); err != nil {
		return err
	}
	if c.Voters <= 0 {
		c.Voters = 3
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReconcileInterval, time.Minute)
	def(&c.ReapInterval, time.Second)
	def(&c.DeadServerGrace, 2*time.Minute)
	def(&c.ApplyTimeout, 5*time.Second)
	def(&c.HoldTimeout, DefaultHoldTimeout)
	def(&c.LeaveDelay, time.Second)
	def(&c.PlanInterval, 2*time.Second)
	if c.MaxCommandBytes <= 0 {
		c.MaxCommandBytes = DefaultMaxCommandBytes
	}
	def(&c.FailoverGrace, 2*time.Minute)
	c.RTT.defaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ErrExposed is the error of a member whose gossip, raft or gRPC listener
// is reachable beyond loopback with no cluster secret.
var ErrExposed = errors.New("cluster: listeners reachable beyond loopback without a cluster secret")

// checkExposure refuses listeners beyond loopback without a secret unless
// Insecure says so. Mutual TLS is not enough on its own: it guards gRPC,
// not raft or gossip.
func (c *Config) checkExposure() error {
	if c.Secret != "" || c.Insecure {
		return nil
	}
	for _, l := range []struct{ name, addr string }{{"gossip", c.GossipListen}, {"raft", c.RaftListen}, {"grpc", c.GRPCListen}} {
		if !IsLoopback(l.addr) {
			return fmt.Errorf("%w: %s listens on %s; set a cluster secret (fusion cluster secret makes one), bind to loopback, or accept the risk with --insecure-cluster", ErrExposed, l.name, l.addr)
		}
	}
	return nil
}

// IsLoopback reports whether a listen address (host:port) binds only to
// loopback: 127.0.0.0/8, ::1 or localhost. An empty host is every
// interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
