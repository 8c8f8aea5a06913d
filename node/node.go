// Package node is the composition root: it builds a node from its
// configuration, starts its parts in order (engine, HTTP frontend) and
// stops them in reverse, draining the requests in flight first.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"fusion/cluster"
	"fusion/cluster/remote"
	"fusion/engine/runner"
	"fusion/mcp/host"
	"fusion/router"
	"fusion/router/auth"
	"fusion/router/dispatch"
	routermcp "fusion/router/mcp"
	"fusion/router/metrics"
	"fusion/router/openai"
	"fusion/router/openclaw"
	"fusion/router/openclaw/raftstore"
)

// Config configures a node. Zero values take the defaults noted.
type Config struct {
	Listen    string // address to listen on (default 127.0.0.1:8000)
	DataDir   string // the node's data directory (created if missing)
	ModelsDir string // models directory (default DataDir/models)
	Preload   []string
	APIKey    string // the admin key: required on every route but /health when set
	// InsecureNoAuth lets a node without an APIKey listen beyond
	// loopback (otherwise New refuses: an open node on the network is a
	// door).
	InsecureNoAuth bool
	// AuthFailures is how many failed key attempts a client address may
	// make per minute before it is answered 429 (0: 20; -1: no limit).
	AuthFailures int
	// MaxSubKeys bounds the live sub-keys (0: 10000).
	MaxSubKeys int
	// KeyUsageInterval is how often a cluster member asks each peer for
	// its sub-keys' usage (0: 250 ms): the rate limits' tolerance.
	KeyUsageInterval time.Duration

	MaxBodyBytes int64         // request body limit (default 10 MiB)
	MaxTokens    int           // max_tokens cap per request, and its default (0: none; the model's context window bounds each generation)
	MaxQueued    int           // generations admitted at once before 429 (default 64)
	MaxToolCalls int           // calls in one forced-tool answer with parallel calls (default 8)
	MaxEmbeds    int           // inputs of one embeddings request before 400 (default 2048)
	Threads      int           // CPU backend threads (default: all cores)
	DrainTimeout time.Duration // how long SIGTERM waits for requests in flight (default 30s)
	// TextCacheModels is how many models' tokenizers and chat templates
	// stay parsed for token counting and loading, loaded or not (default 8).
	TextCacheModels int

	// The prefix cache: its SSD tier lives in DataDir/cache (none without
	// a DataDir). Caps in bytes: 0 takes the default (RAM tier 10% of the
	// machine's RAM, SSD tier 10 GiB), a negative cap turns the tier off.
	CacheHotBytes   int64
	CacheSSDBytes   int64
	CacheWriteQueue int // blocks waiting for the SSD writer before drops (default 64)
	// Scheduler and pool limits (runner.Config; zero takes its default).
	MaxRunning   int           // sequences in running batches (default 16)
	MaxKVBytes   int64         // KV cache of running sequences (default RAM/4)
	StepTokens   int           // tokens per scheduler step (default 512)
	MaxWait      time.Duration // starvation bound of a waiting request (default 30s)
	MemoryBudget int64         // weights of loaded models (default RAM/2)
	IdleTTL      time.Duration // unload models idle that long (default 0: never)

	// CompletionsAsChat names the models whose /v1/completions prompts are
	// rendered as a one-message chat.
	CompletionsAsChat map[string]bool

	// OpenClaw sets the agent sessions' TTL and cap and the event
	// stream's heartbeat (defaults 1 h, 1000, 30 s).
	OpenClaw openclaw.Options
	// Sessions, when set, holds the agent sessions (the cluster's
	// replicated store; the node does not close it); nil: in memory.
	Sessions openclaw.SessionStore
	// Cluster makes the node a cluster member (off unless set).
	Cluster ClusterConfig

	// MCPServers are the MCP servers this node hosts (--mcp-config); their
	// tools are served under /v1/mcp. MCP sets the host's limits (call
	// timeout, backoff; zero values take its defaults).
	MCPServers host.Config
	MCP        host.Options

	Version string
	Logger  *slog.Logger
}

// ErrNoAuth is the error of a node that would listen beyond loopback
// without an API key.
var ErrNoAuth = errors.New("node: no API key")

// Defaults.
const (
	DefaultListen       = "127.0.0.1:8000"
	DefaultDrainTimeout = 30 * time.Second
)

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.ModelsDir == "" && c.DataDir != "" {
		c.ModelsDir = c.DataDir + string(os.PathSeparator) + "models"
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Node is one fusion node: the engine and the HTTP frontend.
type Node struct {
	cfg    Config
	runner *runner.Runner
	router *router.Router
	server *router.Server
	member *cluster.Member // nil when not clustered
	mcp    *host.Host      // nil without MCP servers

	// Cluster data plane (nil when not clustered): the dispatcher over
	// the member's routes, the peers' Engine clients and their loads, the
	// agent sessions in the Raft state, and the loop that reports this
	// node's models and loads its assignments.
	dispatcher *dispatch.Dispatcher
	pool       *remote.Pool
	loads      *remote.Loads
	sessions   *raftstore.Store
	stopSync   context.CancelFunc
	syncDone   chan struct{}
	rateMu     sync.Mutex // peerStats' tokens/s
	rateAt     time.Time
	rateTokens int64
	// Sub-keys: their use on this node (and its peers' reports), and in
	// a cluster the replicated store and the usage exchange.
	keyLimits *auth.Limiter
	keys      *raftKeys
	stopUsage context.CancelFunc
	usageWG   sync.WaitGroup

	stopOnce sync.Once
	stopErr  error
}

// New builds a node: it creates the data directory, scans the models
// directory, loads the preloaded models and binds the listen address. It
// does not serve until Start.
func New(cfg Config) (*Node, error) {
	cfg.defaults()
	if cfg.APIKey == "" && !cfg.InsecureNoAuth && !cluster.IsLoopback(cfg.Listen) {
		return nil, fmt.Errorf("%w: %s is reachable beyond loopback; set an API key, listen on 127.0.0.1, or accept an open node with --insecure-no-auth", ErrNoAuth, cfg.Listen)
	}
	for _, dir := range []string{cfg.DataDir, cfg.ModelsDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	var cacheDir string
	if cfg.DataDir != "" {
		cacheDir = filepath.Join(cfg.DataDir, "cache")
	}
	run, err := runner.New(runner.Config{
		ModelsDir: cfg.ModelsDir, Preload: cfg.Preload, MaxQueued: cfg.MaxQueued, MaxTokens: cfg.MaxTokens,
		MaxRunning: cfg.MaxRunning, MaxKVBytes: cfg.MaxKVBytes, StepTokens: cfg.StepTokens, MaxWait: cfg.MaxWait,
		MemoryBudget: cfg.MemoryBudget, IdleTTL: cfg.IdleTTL,
		Threads: cfg.Threads, MaxToolCalls: cfg.MaxToolCalls, MaxEmbedInputs: cfg.MaxEmbeds, TextCacheModels: cfg.TextCacheModels, Logger: cfg.Logger,
		CacheDir: cacheDir, CacheHotBytes: cfg.CacheHotBytes, CacheSSDBytes: cfg.CacheSSDBytes, CacheWriteQueue: cfg.CacheWriteQueue,
	})
	if err != nil {
		return nil, fmt.Errorf("node: engine: %w", err)
	}
	n := &Node{cfg: cfg, runner: run, keyLimits: auth.NewLimiter(nil)}
	// The MCP servers start now, so the cluster's MCP service (registered
	// while joining) has them.
	var mcpHost routermcp.Host
	if len(cfg.MCPServers.Servers) > 0 {
		opts := cfg.MCP
		opts.Logger, opts.Version = cfg.Logger, cfg.Version
		n.mcp = host.New(cfg.MCPServers, opts)
		mcpHost = n.mcp
	}
	var clusterStatus http.Handler
	sessions := cfg.Sessions
	// Every answer names the node that ran it; a lone node is its own
	// routing table.
	gen := dispatch.New(dispatch.Config{Local: run, Table: dispatch.Solo(soloID(cfg.Cluster.NodeID))})
	if cfg.Cluster.Enabled() {
		// The member advertises the HTTP address, so bind first; the
		// router (over the member's session store and dispatcher) comes
		// after.
		if n.server, err = router.Listen(cfg.Listen, nil, cfg.Logger); err != nil {
			return nil, errors.Join(fmt.Errorf("node: %w", err), n.closeMCP(), run.Close())
		}
		if err = n.joinCluster(); err != nil {
			return nil, errors.Join(err, n.server.Drain(context.Background()), n.closeMCP(), run.Close())
		}
		clusterStatus = n.clusterStatus()
		n.keys = newRaftKeys(n.member)
		gen = n.dispatcher
		mcpHost = n.clusterMCP()
		if sessions == nil {
			n.sessions = raftstore.New(n.member, raftstore.Options{TTL: cfg.OpenClaw.TTL, Cap: cfg.OpenClaw.Cap})
			sessions = n.sessions
		}
	}
	thinkingKey, err := n.thinkingKey()
	if err != nil {
		var drain error
		if n.server != nil {
			drain = n.server.Drain(context.Background())
		}
		return nil, errors.Join(err, drain, n.closeMCP(), run.Close())
	}
	var keys auth.Store
	switch {
	case n.keys != nil:
		keys = n.keys
	case cfg.DataDir != "":
		// A node alone keeps its sub-keys (hashes) in its data dir.
		fileKeys, err := auth.OpenFileStore(filepath.Join(cfg.DataDir, "keys", "subkeys.json"))
		if err != nil {
			return nil, errors.Join(err, n.closeMCP(), run.Close())
		}
		keys = fileKeys
	}
	fails := cfg.AuthFailures
	if fails == 0 {
		fails = auth.DefaultMaxFailures
	}
	n.router = router.New(router.Config{
		Keys: keys, KeyLimits: n.keyLimits, MaxSubKeys: cfg.MaxSubKeys,
		AuthFailures: auth.NewFailLimiter(fails, auth.DefaultFailureWindow, nil),
		MCP:          mcpHost, ThinkingKey: thinkingKey,
		Engine: gen, Stats: n.engineStats, Cache: run, Models: run, APIKey: cfg.APIKey, MaxBodyBytes: cfg.MaxBodyBytes, Cluster: clusterStatus,
		OpenAI:   openai.Options{MaxTokens: cfg.MaxTokens, Backends: []string{"cpu"}, CompletionsAsChat: cfg.CompletionsAsChat},
		OpenClaw: cfg.OpenClaw, Sessions: sessions, Version: cfg.Version, Logger: cfg.Logger,
	})
	if n.server != nil {
		n.server.SetHandler(n.router)
	} else if n.server, err = router.Listen(cfg.Listen, n.router, cfg.Logger); err != nil {
		n.router.Close()
		return nil, errors.Join(fmt.Errorf("node: %w", err), n.closeMCP(), run.Close())
	}
	return n, nil
}

// closeMCP stops the MCP servers (no child process is left).
func (n *Node) closeMCP() error {
	if n.mcp == nil {
		return nil
	}
	return n.mcp.Close()
}

// MCP is the node's MCP host (nil without MCP servers).
func (n *Node) MCP() *host.Host { return n.mcp }

func (n *Node) engineStats() metrics.EngineStats {
	s, pc := n.runner.Stats(), n.runner.CacheStats()
	return metrics.EngineStats{
		InFlight: s.InFlight, QueueDepth: s.Waiting, Cancelled: s.Cancelled,
		ActiveBytes: s.WeightBytes + s.KVBytes, PeakBytes: s.PeakBytes,
		CachedBytes: pc.HotBytes, // the prefix cache's RAM tier
		PrefixCache: pc,
	}
}

// Addr is the address the node listens on (useful with port 0).
func (n *Node) Addr() string { return n.server.Addr() }

// URL is the base URL of the node's API.
func (n *Node) URL() string { return "http://" + n.Addr() }

// Runner is the node's engine.
func (n *Node) Runner() *runner.Runner { return n.runner }

// Router is the node's HTTP frontend.
func (n *Node) Router() *router.Router { return n.router }

// KeyUsage is each sub-key's requests and tokens since the nodes
// started: this node's and its peers' latest reports (for the stats).
func (n *Node) KeyUsage() map[string]auth.Counts { return n.keyLimits.Usage() }

// Metrics are the node's frontend metrics.
func (n *Node) Metrics() *metrics.Metrics { return n.router.Metrics() }

// Start serves in the background.
func (n *Node) Start() {
	if n.member != nil {
		if err := n.member.Start(context.Background()); err != nil {
			n.cfg.Logger.Error("cluster start failed", "err", err)
		} else {
			n.startSync()
			ctx, cancel := context.WithCancel(context.Background())
			n.stopUsage = cancel
			n.usageWG.Add(1)
			go n.followKeyUsage(ctx, &n.usageWG)
		}
	}
	n.server.Serve()
	n.cfg.Logger.Info("node serving", "addr", n.Addr(), "models_dir", n.cfg.ModelsDir, "auth", n.cfg.APIKey != "")
}

// Stop drains the frontend for at most the drain timeout (or until ctx is
// done), then stops the engine. Requests still running at the deadline are
// cancelled. Later calls return the first call's result.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, n.cfg.DrainTimeout)
		defer cancel()
		n.cfg.Logger.Info("node draining", "timeout", n.cfg.DrainTimeout)
		n.markDraining(ctx)
		err := n.server.Drain(ctx)
		n.router.Close()
		// MCP servers stop after the frontend: calls in flight have
		// finished or been cancelled by the drain.
		n.stopErr = errors.Join(err, n.closeMCP(), n.stopCluster(ctx), n.runner.Close())
		n.cfg.Logger.Info("node stopped")
	})
	return n.stopErr
}

// Run starts the node and serves until ctx is done (SIGTERM), then stops
// it. A clean drain returns nil.
func (n *Node) Run(ctx context.Context) error {
	n.Start()
	<-ctx.Done()
	return n.Stop(context.WithoutCancel(ctx))
}
