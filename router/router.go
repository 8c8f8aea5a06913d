package router

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"fusion/dashboard"
	"fusion/engine"
	"fusion/engine/runner"
	"fusion/router/admin"
	"fusion/router/anthropic"
	"fusion/router/auth"
	"fusion/router/dispatch"
	"fusion/router/mcp"
	"fusion/router/mcpchat"
	"fusion/router/mcpserver"
	"fusion/router/metrics"
	"fusion/router/openai"
	"fusion/router/openclaw"
	"fusion/router/servedby"
)

// Config is what the frontend needs.
type Config struct {
	// Engine serves generations, models and tokenization.
	Engine engine.Generator
	// Stats gives the engine's live figures (memory, in-flight, queue) for
	// /health and /metrics; nil reports zeros.
	Stats func() metrics.EngineStats
	// Draining, when set, reports whether the node is draining: /health
	// says so ("draining": true), and GET /health?ready answers 503 then,
	// so a load balancer stops sending it new clients.
	Draining func() bool
	// Backend, when set, is the engine's compute backend for /health.
	Backend func() runner.BackendStatus
	// Cache serves the prefix-cache admin routes (nil: not mounted).
	Cache admin.Cache
	// Models serves the engine pool's admin routes (nil: not mounted).
	Models admin.Models
	// Admin configures the rest of the admin routes (its Cache, Models,
	// Metrics and Logger default to the fields above and the router's).
	Admin admin.Config
	// APIKey, when set, is required on every route but /health, as
	// "Authorization: Bearer KEY" or "x-api-key: KEY": the admin key.
	// Sub-keys (Keys) then open the routes of their scopes.
	APIKey string
	// Keys stores the sub-keys (nil: in memory, for this router only).
	Keys auth.Store
	// KeyLimits counts the sub-keys' use against their rate limits (nil:
	// this node only; a cluster feeds it its peers' reports).
	KeyLimits *auth.Limiter
	// MaxSubKeys bounds the live sub-keys (0: auth.DefaultMaxKeys).
	MaxSubKeys int
	// AuthFailures limits failed key attempts per client address (nil:
	// auth.DefaultMaxFailures per auth.DefaultFailureWindow).
	AuthFailures *auth.FailLimiter
	// MaxBodyBytes limits request bodies (default 10 MiB); larger ones get
	// a 413.
	MaxBodyBytes int64
	// OpenAI holds the settings of the OpenAI dialect.
	OpenAI openai.Options
	// OpenClaw holds the settings of the OpenClaw agent protocol.
	OpenClaw openclaw.Options
	// Sessions stores the agent sessions (the Raft state in a cluster);
	// nil: an in-memory store the router owns, closed by Close.
	Sessions openclaw.SessionStore
	// Version is reported by /health and in system_fingerprint.
	Version string
	Logger  *slog.Logger
	// ThinkingKey signs the Anthropic dialect's thinking blocks (nil: a
	// random key for this process only).
	ThinkingKey anthropic.KeySource
	// Cluster, when set, serves /admin/api/cluster and below (behind the
	// API key): the cluster status and settings.
	Cluster http.Handler
	// MCP is the node's MCP host behind /v1/mcp (nil: no servers, no tools).
	MCP mcp.Host
	// Panel holds the limits of the admin panel's sign-in sessions.
	Panel dashboard.Options
	// PanelSessions stores those sessions (the replicated state in a
	// cluster, so they are good on every node); nil: in memory.
	PanelSessions dashboard.SessionStore
	// MCPMaxSteps bounds the model turns of a chat request with MCP tools
	// (0: mcpchat.DefaultMaxSteps).
	MCPMaxSteps int
}

// DefaultMaxBodyBytes is the body limit when Config.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 10 << 20

// Router is the HTTP frontend of a node.
type Router struct {
	handler  http.Handler
	metrics  *metrics.Metrics
	openclaw *openclaw.Handler
	admin    *admin.Handler
	ownStore *openclaw.MemStore // nil when the sessions live elsewhere
	auth     *auth.Authenticator
	mux      *chi.Mux
	panel    *dashboard.Panel
}

// New builds the frontend.
func New(cfg Config) *Router {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	m := metrics.New(cfg.Stats)
	tools := &mcpchat.Runner{Host: cfg.MCP, MaxSteps: cfg.MCPMaxSteps}
	oa := openai.New(openai.Config{
		Engine: cfg.Engine, Metrics: m, Options: cfg.OpenAI, Logger: cfg.Logger,
		SystemFingerprint: "fp_fusion_" + cfg.Version, MCP: tools,
	})
	an := anthropic.New(anthropic.Config{
		Engine: cfg.Engine, Metrics: m, Options: anthropic.Options{MaxTokens: cfg.OpenAI.MaxTokens}, ThinkingKey: cfg.ThinkingKey, Logger: cfg.Logger, MCP: tools,
	})

	rt := &Router{metrics: m}
	ac := cfg.Admin
	if ac.Cache == nil {
		ac.Cache = cfg.Cache
	}
	if ac.Models == nil {
		ac.Models = cfg.Models
	}
	if ac.Metrics == nil {
		ac.Metrics = m
	}
	if ac.Logger == nil {
		ac.Logger = cfg.Logger
	}
	rt.admin = admin.New(ac)
	sessions := cfg.Sessions
	if sessions == nil {
		rt.ownStore = openclaw.NewMemStore(openclaw.MemStoreOptions{TTL: cfg.OpenClaw.TTL, Cap: cfg.OpenClaw.Cap})
		sessions = rt.ownStore
	}
	rt.openclaw = openclaw.New(openclaw.Config{
		Engine: cfg.Engine, Store: sessions, OpenAI: cfg.OpenAI, Options: cfg.OpenClaw, Metrics: m, Logger: cfg.Logger, MCP: tools,
	})

	keys := cfg.Keys
	if keys == nil {
		keys = auth.NewMemStore()
	}
	fails := cfg.AuthFailures
	if fails == nil {
		fails = auth.NewFailLimiter(auth.DefaultMaxFailures, auth.DefaultFailureWindow, nil)
	}
	rt.auth = auth.New(auth.Config{AdminKey: cfg.APIKey, Keys: keys, Limits: cfg.KeyLimits, Failures: fails, Logger: cfg.Logger})

	r := chi.NewRouter()
	r.Use(requestID, servedby.Middleware, dispatch.SessionMiddleware, accessLog(cfg.Logger, m), recoverer(cfg.Logger), limitBody(cfg.MaxBodyBytes))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		if anthropic.Wants(r) {
			anthropic.WriteError(w, anthropic.RouteNotFound(r.Method, r.URL.Path))
			return
		}
		openai.WriteError(w, openai.NotFound(r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		if anthropic.Wants(r) {
			anthropic.WriteError(w, anthropic.MethodNotAllowed(r.Method, r.URL.Path))
			return
		}
		openai.WriteError(w, openai.MethodNotAllowed(r.Method, r.URL.Path))
	})

	h := &health{engine: cfg.Engine, metrics: m, version: cfg.Version, backend: cfg.Backend, draining: cfg.Draining}
	r.Get("/health", h.health)
	r.Group(func(r chi.Router) {
		r.Use(rt.auth.Middleware(openaiDeny), meterKeys(rt.auth))
		oa.Mount(r)
		rt.openclaw.Mount(r)
		mcp.New(cfg.MCP).Mount(r)
		mcpSrv := mcpserver.New(mcpserver.Config{Engine: cfg.Engine, Options: cfg.OpenAI, Version: cfg.Version, MaxBodyBytes: cfg.MaxBodyBytes})
		r.Handle("/mcp", mcpSrv)
		r.Get("/metrics", h.metricsHandler())
		rt.admin.Mount(r)
		auth.NewRoutes(rt.auth, cfg.MaxSubKeys).Mount(r)
		if cfg.Cluster != nil {
			r.Handle("/admin/api/cluster", cfg.Cluster)
			r.Handle("/admin/api/cluster/*", cfg.Cluster)
		}
	})
	r.Group(func(r chi.Router) {
		r.Use(rt.auth.Middleware(anthropicDeny), meterKeys(rt.auth)) // 401s in Anthropic's shape
		an.Mount(r)
	})
	// The panel (/admin/ but for /admin/api) is outside the chi tree: its
	// pages and sign-in are open, and a signed-in browser's calls reach the
	// tree carrying the admin key.
	rt.panel = dashboard.New(dashboard.Config{AdminKey: cfg.APIKey, Failures: fails, NodeID: cfg.Admin.Self,
		Sessions: cfg.PanelSessions, Options: cfg.Panel, Logger: cfg.Logger})
	rt.handler, rt.mux = rt.panel.Wrap(r), r
	return rt
}

// shutdown ends the long-lived event streams, which would otherwise hold
// a drain until its deadline; the server calls it when it starts
// draining.
func (rt *Router) shutdown() { rt.openclaw.Shutdown() }

// Close releases what the router owns (the in-memory session store);
// call it after the server has drained.
func (rt *Router) Close() {
	rt.openclaw.Shutdown()
	if rt.ownStore != nil {
		rt.ownStore.Close()
	}
}

// ServeHTTP serves a request.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) { rt.handler.ServeHTTP(w, r) }

// Admin returns the admin routes' handler (its Serve runs the calls
// peers forward).
func (rt *Router) Admin() *admin.Handler { return rt.admin }

// Routes lists the frontend's routes (the security tests walk them all).
func (rt *Router) Routes() chi.Routes { return rt.mux }

// Auth is the frontend's authenticator (its Limits().Usage() is each
// sub-key's use).
func (rt *Router) Auth() *auth.Authenticator { return rt.auth }

// Panel is the admin panel (its CookieName names the session cookie).
func (rt *Router) Panel() *dashboard.Panel { return rt.panel }

// Metrics returns the frontend's metrics.
func (rt *Router) Metrics() *metrics.Metrics { return rt.metrics }
