// Package node is the composition root: it builds a node from its
// configuration, starts its parts in order (engine, HTTP frontend) and
// stops them in reverse, draining the requests in flight first.
package node

import (
	"context"
	"crypto/tls"
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
	"fusion/dashboard"
	"fusion/engine/runner"
	"fusion/hub"
	"fusion/internal/tlsreload"
	"fusion/internal/tracing"
	"fusion/jobs"
	"fusion/mcp/host"
	"fusion/router"
	"fusion/router/admin"
	"fusion/router/auth"
	"fusion/router/cloud"
	"fusion/router/dispatch"
	routermcp "fusion/router/mcp"
	"fusion/router/metrics"
	"fusion/router/openai"
	"fusion/router/openclaw"
	"fusion/router/openclaw/raftstore"
	"fusion/store"
)

// Config configures a node. Zero values take the defaults noted.
type Config struct {
	Listen    string // address to listen on (default 127.0.0.1:8000)
	DataDir   string // the node's data directory (created if missing)
	ModelsDir string // models directory (default DataDir/models)
	// HFCache is a Hugging Face cache directory (huggingface_hub's
	// layout, e.g. ~/.cache/huggingface/hub) whose complete snapshots are
	// served as models named ORG/NAME, and which a download of a repo
	// already complete in it answers from (hub.FetchOptions.HFCache).
	// "" = none. It is only read.
	HFCache string
	Preload []string
	APIKey  string // the admin key: required on every route but /health when set
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

	MaxBodyBytes int64 // request body limit (default 10 MiB)
	// MaxAudioBytes and MaxAudioSeconds cap an audio upload (0: 25 MiB and
	// 30 minutes).
	MaxAudioBytes, MaxAudioSeconds int64
	MaxTokens                      int // max_tokens cap per request, and its default (0: none; the model's context window bounds each generation)
	MaxQueued                      int // generations admitted at once before 429 (default 64)
	MaxToolCalls                   int // calls in one forced-tool answer with parallel calls (default 8)
	DraftTokens                    int // tokens speculative decoding proposes per step (default runner.DefaultDraftTokens)
	MaxEmbeds                      int // inputs of one embeddings request before 400 (default 2048)
	// MaxRerankDocs caps the documents of one rerank request (default
	// runner.DefaultMaxRerankDocuments).
	MaxRerankDocs int
	// MaxSpeechInput caps /v1/audio/speech's input in characters (0: 4096).
	MaxSpeechInput int
	// MaxTranscriptionTokens caps the max_tokens of a transcription (0:
	// openai.DefaultMaxTranscriptionTokens).
	MaxTranscriptionTokens int
	// VADModel is the model vad_filter and batched transcriptions find
	// speech with ("": openai.DefaultVADModel).
	VADModel string
	// MaxImageSide, MaxImages and MaxImageSteps cap an image generation's
	// sides, n and steps (0: openai's defaults).
	MaxImageSide, MaxImages, MaxImageSteps int
	// ImageRetention is how long a url result of an image generation is
	// served (0: openai.DefaultImageRetention).
	ImageRetention time.Duration
	// EmbedBatchTokens bounds one embedding-model pass in padded tokens
	// (default runner.DefaultEmbedBatchTokens).
	EmbedBatchTokens int
	Threads          int           // CPU backend threads (default: all cores)
	DrainTimeout     time.Duration // how long SIGTERM waits for requests in flight (default 30s)
	// DrainSettle is how long a node drained by fusion cluster drain must
	// have been idle before it reports itself drained (default
	// DefaultDrainSettle): peers that had not yet heard the drain may
	// still forward a request in that time.
	DrainSettle time.Duration

	// Backend is the compute backend: auto (""), mlx or cpu; ModelBackends
	// overrides it per model name (see runner.Config.Backend).
	Backend       string
	ModelBackends map[string]string
	// MLXMemoryLimit and MLXCacheLimit are MLX's limits in bytes (0: MLX's).
	MLXMemoryLimit, MLXCacheLimit int64
	// WrapBackend wraps every backend a model gets (tests inject faults).
	WrapBackend runner.WrapBackend

	// TextCacheModels is how many models' tokenizers and chat templates
	// stay parsed for token counting and loading, loaded or not (default 8).
	TextCacheModels int

	// The prefix cache: its SSD tier lives in DataDir/cache (none without
	// a DataDir). Caps in bytes: 0 takes the default (RAM tier 10% of the
	// machine's RAM, SSD tier 10 GiB), a negative cap turns the tier off.
	CacheHotBytes   int64
	CacheSSDBytes   int64
	CacheWriteQueue int // blocks waiting for the SSD writer before drops (default 64)
	CacheStateEvery int // blocks between recurrent-state snapshots of DeltaNet models (default 4)
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
	// MCPMaxSteps bounds the model turns of a chat request with MCP
	// tools (0: router/mcpchat's default, 8).
	MCPMaxSteps int
	// MCPMaxConfigBytes bounds the configuration PUT
	// /admin/api/mcp/servers takes (0: admin.DefaultMaxMCPConfigBytes).
	MCPMaxConfigBytes int
	// Panel holds the admin panel's session limits (zero values: the
	// dashboard package's defaults).
	Panel dashboard.Options
	// HF configures Hugging Face downloads and Jobs the background jobs
	// that run them.
	HF   HFConfig
	Jobs JobsConfig
	// Bench bounds what one benchmark request may ask for (zero fields:
	// router/admin's defaults).
	Bench admin.BenchLimits

	// TLSCertFile and TLSKeyFile make the frontend speak HTTPS (and
	// HTTP/2). The pair is read again on ReloadTLS (SIGHUP) and whenever
	// its files change, checked every TLSWatchInterval (default 10s;
	// negative: only on ReloadTLS); a pair that does not load leaves the
	// current one serving.
	TLSCertFile, TLSKeyFile string
	TLSWatchInterval        time.Duration
	// Effective is the configuration as the program resolved it, for GET
	// /admin/api/global-settings (key, value in force, source; secrets as
	// set/unset); nil: the node describes its Config (source "config").
	Effective []admin.GlobalSetting
	// CheckSetting validates a global setting's value as its flag would
	// (nil: the node checks the kinds of the values it knows).
	CheckSetting func(key, value string) error
	// LogLevel, when set, is the level of the program's logger: the live
	// global setting log_level changes it.
	LogLevel *slog.LevelVar
	// Logs is the node's log file, served by /admin/api/logs (nil: none).
	Logs admin.Logs

	// Cloud is the cloud upstreams' configuration from the program's
	// --cloud-config file: in force until one is stored through PUT
	// /admin/api/cloud (replicated in a cluster).
	Cloud cloud.Config

	// Tracing sends OpenTelemetry traces to Tracing.Endpoint (off when
	// empty); the node fills in its id and version.
	Tracing tracing.Config

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
	DefaultTLSWatch     = 10 * time.Second
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
	if c.DrainSettle == 0 {
		c.DrainSettle = DefaultDrainSettle
	}
	if c.TLSWatchInterval == 0 {
		c.TLSWatchInterval = DefaultTLSWatch
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
	member *cluster.Member        // nil when not clustered
	mcp    *host.Host             // the node's MCP servers (maybe none)
	cert   *tlsreload.Certificate // nil without TLS
	tracer *tracing.Tracer        // nil: tracing off
	cloud  *cloud.Client          // the cloud upstreams (maybe none configured)
	// imageFiles are the url results of the image generations this node
	// answered: served by its OpenAI handler, and to its peers by its
	// Engine service (any node's GET /v1/images/files/{id}).
	imageFiles *openai.ImageStore

	stopWatch context.CancelFunc // the TLS files' watcher (nil if none)
	watchDone chan struct{}

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
	stages     stageSet              // later stages of sharded models held here
	shapes     map[string]modelShape // models' layers and heads for the inventory (sync loop only)
	rateMu     sync.Mutex            // peerStats' tokens/s
	rateAt     time.Time
	rateTokens int64
	// Sub-keys: their use on this node (and its peers' reports), and in
	// a cluster the replicated store and the usage exchange.
	keyLimits *auth.Limiter
	keys      *raftKeys
	stopUsage context.CancelFunc
	usageWG   sync.WaitGroup

	// The admin API's state: node.db (nil without a data dir), the
	// settings in force, the global configuration, the stats saver.
	db        *store.NodeDB
	admin     *adminState
	global    *globalConfig
	stopAdmin context.CancelFunc
	adminDone []chan struct{}

	// Background jobs (downloads) and the Hugging Face client.
	jobs       *jobs.Manager
	hub        *hub.Client
	modelScope *hub.Client // the same, speaking ModelScope's API
	stopJobs   context.CancelFunc
	jobsDone   chan struct{}
	// A lone node's benchmark profiles, kept in node.db (a cluster's
	// are in its Raft state).
	profiles soloProfiles

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
	var cert *tlsreload.Certificate
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		var err error
		if cert, err = tlsreload.Load(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.Logger); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
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
	var models map[string]runner.ModelSettings
	for name, be := range cfg.ModelBackends {
		if models == nil {
			models = map[string]runner.ModelSettings{}
		}
		models[name] = runner.ModelSettings{Backend: be}
	}
	run, err := runner.New(runner.Config{
		Backend: cfg.Backend, Models: models, MLXMemoryLimit: cfg.MLXMemoryLimit, MLXCacheLimit: cfg.MLXCacheLimit, WrapBackend: cfg.WrapBackend,
		ModelsDir: cfg.ModelsDir, HFCache: cfg.HFCache, Preload: cfg.Preload, MaxQueued: cfg.MaxQueued, MaxTokens: cfg.MaxTokens,
		MaxRunning: cfg.MaxRunning, MaxKVBytes: cfg.MaxKVBytes, StepTokens: cfg.StepTokens, MaxWait: cfg.MaxWait,
		MemoryBudget: cfg.MemoryBudget, IdleTTL: cfg.IdleTTL,
		Threads: cfg.Threads, MaxToolCalls: cfg.MaxToolCalls, DraftTokens: cfg.DraftTokens, MaxEmbedInputs: cfg.MaxEmbeds, MaxRerankDocuments: cfg.MaxRerankDocs, EmbedBatchTokens: cfg.EmbedBatchTokens, TextCacheModels: cfg.TextCacheModels, Logger: cfg.Logger,
		CacheDir: cacheDir, CacheHotBytes: cfg.CacheHotBytes, CacheSSDBytes: cfg.CacheSSDBytes, CacheWriteQueue: cfg.CacheWriteQueue,
		CacheStateEvery: cfg.CacheStateEvery,
	})
	if err != nil {
		return nil, fmt.Errorf("node: engine: %w", err)
	}
	tcfg := cfg.Tracing
	tcfg.NodeID, tcfg.Version = soloID(cfg.Cluster.NodeID), cfg.Version
	tracer, err := tracing.New(context.Background(), tcfg)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("node: %w", err), run.Close())
	}
	built := false
	defer func() {
		if !built { // every error return below
			_ = tracer.Shutdown(context.Background())
		}
	}()
	db, err := openNodeDB(cfg.DataDir)
	if err != nil {
		return nil, errors.Join(err, run.Close())
	}
	n := &Node{cfg: cfg, runner: run, db: db, admin: &adminState{}, cert: cert, tracer: tracer, keyLimits: auth.NewLimiter(nil),
		cloud: cloud.New(cloud.Options{Logger: cfg.Logger}), imageFiles: openai.NewImageStore(0)}
	n.cloud.SetConfig(cfg.Cloud)
	n.global = &globalConfig{cfg: &n.cfg}
	closeDB := func() error {
		if db == nil {
			return nil
		}
		return db.Close()
	}
	// The MCP servers start now, so the cluster's MCP service (registered
	// while joining) has them.
	// The host runs even with no servers: /admin/api/mcp/servers may add
	// some at run time.
	mcpOpts := cfg.MCP
	mcpOpts.Logger, mcpOpts.Version = cfg.Logger, cfg.Version
	mcpOpts.Node = soloID(cfg.Cluster.NodeID) // a server may name the nodes that run it
	n.mcp = host.New(cfg.MCPServers, mcpOpts)
	var mcpHost routermcp.Host = n.mcp
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
			return nil, errors.Join(fmt.Errorf("node: %w", err), n.closeMCP(), run.Close(), closeDB())
		}
		if err = n.joinCluster(); err != nil {
			return nil, errors.Join(err, n.server.Drain(context.Background()), n.closeMCP(), run.Close(), closeDB())
		}
		clusterStatus = n.clusterStatus()
		n.keys = newRaftKeys(n.member)
		gen = n.dispatcher
		n.admin.store = clusterSettings{m: n.member}
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
		return nil, errors.Join(err, drain, n.closeMCP(), run.Close(), closeDB())
	}
	if n.admin.store == nil {
		solo, err := newSoloSettings(db, n.applySettings)
		if err != nil {
			var drain error
			if n.server != nil {
				drain = n.server.Drain(context.Background())
			}
			return nil, errors.Join(err, drain, n.closeMCP(), run.Close(), closeDB())
		}
		n.admin.store = solo
		n.applySettings()
		if err := n.profiles.open(db); err != nil {
			var drain error
			if n.server != nil {
				drain = n.server.Drain(context.Background())
			}
			return nil, errors.Join(err, drain, n.closeMCP(), run.Close(), closeDB())
		}
	}
	if err := n.newJobs(); err != nil {
		var drain error
		if n.server != nil {
			drain = n.server.Drain(context.Background())
		}
		return nil, errors.Join(err, drain, n.closeMCP(), run.Close(), closeDB())
	}
	adminCfg := admin.Config{Self: soloID(cfg.Cluster.NodeID), Store: n.admin.store, Engine: n.engineFigures,
		Jobs: nodeJobs{m: n.jobs}, Hub: nodeHub{n: n}, Quantizer: nodeQuantizer{n: n}, Bench: nodeBench{n: n},
		PersistAllTime: n.persistAllTime, Global: n.global, Logs: cfg.Logs,
		MCP: nodeMCP{n: n, servers: mcpHost.Servers}, MaxMCPConfigBytes: cfg.MCPMaxConfigBytes, Cloud: nodeCloud{n: n}}
	adminCfg.BenchLimits = cfg.Bench
	var panelSessions dashboard.SessionStore // nil: the panel's own, in memory
	if n.member != nil {
		adminCfg.Self, adminCfg.Peers, adminCfg.Placer = n.member.ID(), adminPeers{n: n}, n.member
		panelSessions = n.member.PanelSessions()
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
	var draining func() bool
	if n.member != nil {
		draining = n.member.Draining
	}
	fails := cfg.AuthFailures
	if fails == 0 {
		fails = auth.DefaultMaxFailures
	}
	n.router = router.New(router.Config{
		Keys: keys, KeyLimits: n.keyLimits, MaxSubKeys: cfg.MaxSubKeys,
		AuthFailures: auth.NewFailLimiter(fails, auth.DefaultFailureWindow, nil),
		MCP:          mcpHost, MCPMaxSteps: cfg.MCPMaxSteps, Panel: cfg.Panel, PanelSessions: panelSessions,
		ThinkingKey: thinkingKey,
		Backend:     run.BackendStatus, Draining: draining,
		Engine: cloudEngine{aliasEngine: aliasEngine{Dispatcher: gen, a: n.admin}, cloud: n.cloud}, Stats: n.engineStats, Cache: run, Models: run, APIKey: cfg.APIKey, MaxBodyBytes: cfg.MaxBodyBytes, Cluster: clusterStatus,
		Admin: adminCfg,
		OpenAI: openai.Options{MaxTokens: cfg.MaxTokens, CompletionsAsChat: cfg.CompletionsAsChat, MaxTranscriptionTokens: cfg.MaxTranscriptionTokens,
			AsChat: n.admin.completionsAsChat, MaxAudioBytes: cfg.MaxAudioBytes, MaxAudioSeconds: float64(cfg.MaxAudioSeconds),
			MaxSpeechInput: cfg.MaxSpeechInput, VADModel: cfg.VADModel,
			MaxImageSide: cfg.MaxImageSide, MaxImages: cfg.MaxImages, MaxImageSteps: cfg.MaxImageSteps, ImageRetention: cfg.ImageRetention,
			ImageFiles: n.imageFiles, NodeID: n.imageNodeID()},

		OpenClaw: cfg.OpenClaw, Sessions: sessions, Version: cfg.Version, Logger: cfg.Logger,
	})
	n.admin.handler.Store(n.router.Admin())
	if err := n.restoreAllTime(n.router.Metrics()); err != nil {
		n.cfg.Logger.Warn("all-time stats not restored", "err", err)
	}
	handler := n.tracer.Middleware(n.router)
	if n.server != nil {
		n.server.SetHandler(handler)
	} else if n.server, err = router.Listen(cfg.Listen, handler, cfg.Logger); err != nil {
		n.router.Close()
		return nil, errors.Join(fmt.Errorf("node: %w", err), n.closeMCP(), run.Close(), closeDB())
	}
	if cert != nil {
		n.server.SetTLS(cert.Config())
	}
	built = true
	return n, nil
}

// ReloadTLS reads the HTTPS certificate and key again (the server calls it
// on SIGHUP); the current pair stays when the new one does not load. A
// node without TLS has nothing to reload.
func (n *Node) ReloadTLS() error {
	if n.cert == nil {
		return nil
	}
	changed, err := n.cert.Reload()
	if err != nil {
		return err
	}
	if changed {
		n.cfg.Logger.Info("tls: certificate reloaded", "subject", n.cert.Leaf().Subject.String(), "not_after", n.cert.Leaf().NotAfter)
	}
	return nil
}

// closeMCP stops the MCP servers (no child process is left).
func (n *Node) closeMCP() error {
	return n.mcp.Close()
}

// MCP is the node's MCP host.
func (n *Node) MCP() *host.Host { return n.mcp }

func (n *Node) engineStats() metrics.EngineStats {
	s, pc := n.runner.Stats(), n.runner.CacheStats()
	st := metrics.EngineStats{
		InFlight: s.InFlight, QueueDepth: s.Waiting, Cancelled: s.Cancelled,
		ActiveBytes: s.WeightBytes + s.KVBytes, PeakBytes: s.PeakBytes,
		CachedBytes: pc.HotBytes, // the prefix cache's RAM tier
		PrefixCache: pc,
		Drafted:     s.Drafted, Accepted: s.Accepted,
	}
	// When MLX serves, memory is MLX's allocator counters (weights, KV and
	// a step's arrays live there; cached is its buffer cache).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := n.runner.MLXMemory(ctx); err == nil {
		st.ActiveBytes, st.PeakBytes, st.CachedBytes = m.Active, m.Peak, m.Cache
	}
	return st
}

// Addr is the address the node listens on (useful with port 0).
func (n *Node) Addr() string { return n.server.Addr() }

// URL is the base URL of the node's API.
func (n *Node) URL() string {
	if n.cert != nil {
		return "https://" + n.Addr()
	}
	return "http://" + n.Addr()
}

// CheckHealth asks the node's own HTTP listener for /health: nil when it
// answers 200. The service manager's watchdog is answered only then. Over
// HTTPS the certificate is not checked (the node is talking to itself).
func (n *Node) CheckHealth(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/health", nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

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
	if n.cert != nil && n.cfg.TLSWatchInterval > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		n.stopWatch, n.watchDone = cancel, make(chan struct{})
		go func() {
			defer close(n.watchDone)
			n.cert.Watch(ctx, n.cfg.TLSWatchInterval)
		}()
	}
	n.startJobs()
	ctx, cancel := context.WithCancel(context.Background())
	n.stopAdmin = cancel
	saved := make(chan struct{})
	n.adminDone = append(n.adminDone, saved)
	go n.saveStatsLoop(ctx, saved)
	if n.member != nil {
		watched := make(chan struct{})
		n.adminDone = append(n.adminDone, watched)
		go func() {
			defer close(watched)
			n.watchSettings(ctx)
		}()
		drains := make(chan struct{})
		n.adminDone = append(n.adminDone, drains)
		go func() {
			defer close(drains)
			n.followDrain(ctx)
		}()
	}
	n.server.Serve()
	n.cfg.Logger.Info("node serving", "addr", n.Addr(), "tls", n.cert != nil, "models_dir", n.cfg.ModelsDir, "auth", n.cfg.APIKey != "")
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
		if n.stopWatch != nil {
			n.stopWatch()
			<-n.watchDone
		}
		n.router.Close()
		// MCP servers stop after the frontend: calls in flight have
		// finished or been cancelled by the drain.
		// Jobs stop before the cluster is left, so their records say
		// interrupted.
		n.stopErr = errors.Join(err, n.closeJobs(), n.closeMCP(), n.stopCluster(ctx), n.runner.Close(), n.closeAdmin(), n.tracer.Shutdown(ctx))
		n.cfg.Logger.Info("node stopped")
	})
	return n.stopErr
}

// closeAdmin stops the admin loops, saves the all-time stats and closes
// node.db.
func (n *Node) closeAdmin() error {
	if n.stopAdmin != nil {
		n.stopAdmin()
		for _, d := range n.adminDone {
			<-d
		}
	}
	if n.db == nil {
		return nil
	}
	return errors.Join(n.persistAllTime(n.router.Metrics().AllTime()), n.db.Close())
}

// Run starts the node and serves until ctx is done (SIGTERM), then stops
// it. A clean drain returns nil.
func (n *Node) Run(ctx context.Context) error {
	n.Start()
	<-ctx.Done()
	return n.Stop(context.WithoutCancel(ctx))
}
