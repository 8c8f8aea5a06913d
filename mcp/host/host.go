// Package host is fusion's MCP host: it connects to the MCP servers of a
// Claude Desktop style configuration (child processes over stdio, or
// streamable HTTP / SSE endpoints) with the official Go SDK, keeps each
// one running (state, restart with backoff), lists their tools under
// names unique across servers, validates arguments against each tool's
// input schema and calls tools with a timeout. It knows nothing of HTTP
// dialects: router/mcp serves it.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// State is a server's state.
type State string

// States of a server.
const (
	StateStarting State = "starting" // connecting, initializing, listing tools
	StateReady    State = "ready"    // its tools can be called
	StateFailed   State = "failed"   // the last start or session failed; retried after a backoff
	StateStopped  State = "stopped"  // the host is closed
	// StateRemote: configured to run on other nodes (its Nodes) only.
	StateRemote State = "remote"
)

// Options are the host's limits. Zero values take the defaults.
type Options struct {
	// CallTimeout bounds one tool call (default 60 s); past it the call
	// is cancelled and fails with a CallError whose Timeout is set.
	CallTimeout time.Duration
	// StartTimeout bounds connecting, initializing and listing the tools
	// of a server (default 30 s).
	StartTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a failed server is
	// started again: it doubles from Min to Max after each failure and
	// goes back to Min once a session lasted longer than Max (defaults
	// 500 ms and 30 s).
	MinBackoff, MaxBackoff time.Duration
	// StderrTail is how many bytes of a stdio server's last stderr output
	// are kept for its failure message (default 2 KiB).
	StderrTail int
	// TerminateGrace is how long a stdio server has to exit once its stdin
	// is closed before it gets SIGTERM, then as long again before SIGKILL
	// (default 2 s).
	TerminateGrace time.Duration
	// Version is reported to servers as the client's version.
	Version string
	// Node is this node's id: a server whose Nodes do not name it is not
	// run here, only listed (StateRemote).
	Node string
	// Getenv resolves ${NAME} in the entries Update is given (default
	// os.Getenv): a replicated configuration is resolved on the node that
	// runs the server, from that node's environment.
	Getenv func(string) string
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultCallTimeout    = 60 * time.Second
	DefaultStartTimeout   = 30 * time.Second
	DefaultMinBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultStderrTail     = 2 << 10
	DefaultTerminateGrace = 2 * time.Second
)

func (o *Options) defaults() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.StderrTail <= 0 {
		o.StderrTail = DefaultStderrTail
	}
	if o.TerminateGrace <= 0 {
		o.TerminateGrace = DefaultTerminateGrace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
}

// Provider is what serves MCP servers and their tools to the router: a
// *Host, or a cluster's merged view of every node's (cluster/mcpremote).
type Provider interface {
	Servers() []ServerStatus
	Tools() []Tool
	Call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, Tool, error)
}

var _ Provider = (*Host)(nil)

// Host runs the configured MCP servers. Update changes them while it runs.
type Host struct {
	opts   Options
	ctx    context.Context // every server's context descends from it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	updateMu sync.Mutex // one Update (or Close) at a time
	closed   bool       // under updateMu

	mu      sync.RWMutex
	config  Config    // as written, sorted by name
	servers []*server // sorted by name
	byName  map[string]*server
	remote  []ServerConfig // configured for other nodes only, sorted by name
}

// New starts every server of cfg in the background; Close stops them.
func New(cfg Config, opts Options) *Host {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{opts: opts, ctx: ctx, cancel: cancel, byName: map[string]*server{}}
	h.Update(cfg)
	return h
}

// Update puts cfg in force without a restart: servers it adds are
// started, servers it drops are stopped (their processes gone when Update
// returns), servers whose entry changed (as written) are stopped and
// started again, and the others are left running untouched. Entries are
// resolved (${NAME}) here, with Options.Getenv; an entry whose variable
// is not set on this node is listed as failed, saying which.
func (h *Host) Update(cfg Config) {
	h.updateMu.Lock()
	defer h.updateMu.Unlock()
	if h.closed {
		return
	}
	var written Config
	var remote []ServerConfig
	next := map[string]*server{}
	var start []*server
	h.mu.RLock()
	for _, sc := range cfg.Servers {
		w := sc.Written()
		written.Servers = append(written.Servers, w)
		if !sc.RunsOn(h.opts.Node) {
			remote = append(remote, w)
			continue
		}
		if old := h.byName[sc.Name]; old != nil && reflect.DeepEqual(old.written, w) {
			next[sc.Name] = old
			continue
		}
		s := h.newServer(sc)
		next[sc.Name] = s
		start = append(start, s)
	}
	var stop []*server
	for name, old := range h.byName {
		if next[name] != old {
			stop = append(stop, old)
		}
	}
	h.mu.RUnlock()

	// The old servers go first, so a changed server never runs twice.
	var wg sync.WaitGroup
	for _, s := range stop {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.stop()
		}()
	}
	wg.Wait()

	servers := make([]*server, 0, len(next))
	for _, s := range next {
		servers = append(servers, s)
	}
	sort.Slice(servers, func(i, j int) bool { return servers[i].cfg.Name < servers[j].cfg.Name })
	sort.Slice(written.Servers, func(i, j int) bool { return written.Servers[i].Name < written.Servers[j].Name })
	sort.Slice(remote, func(i, j int) bool { return remote[i].Name < remote[j].Name })
	h.mu.Lock()
	h.config, h.servers, h.byName, h.remote = written, servers, next, remote
	h.mu.Unlock()
	for _, s := range start {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer close(s.done)
			s.run(s.ctx)
		}()
	}
	if len(start)+len(stop) > 0 {
		h.opts.Logger.Info("mcp servers updated", "started", len(start), "stopped", len(stop), "servers", len(servers))
	}
}

// newServer makes the supervisor of one entry (not yet running).
func (h *Host) newServer(sc ServerConfig) *server {
	w := sc.Written()
	cfg, err := sc, error(nil)
	if sc.written == nil { // as written: resolve it here
		if cfg, err = sc.Interpolate(h.opts.Getenv); err != nil {
			cfg = w
		}
	}
	ctx, cancel := context.WithCancel(h.ctx)
	return &server{cfg: cfg, written: w, startErr: err, opts: &h.opts, log: h.opts.Logger.With("mcp_server", sc.Name),
		state: StateStarting, relist: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// Config is the configuration in force, as written.
func (h *Host) Config() Config {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return Config{Servers: slices.Clone(h.config.Servers)}
}

// Close stops every server (closing stdio servers' stdin, then signalling
// their process group) and waits until they are gone.
func (h *Host) Close() error {
	h.once.Do(func() {
		h.updateMu.Lock()
		h.closed = true
		h.updateMu.Unlock()
		h.cancel()
		h.wg.Wait()
	})
	return nil
}

// snapshot is the servers and remote entries now.
func (h *Host) snapshot() ([]*server, []ServerConfig) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.servers, h.remote
}

func (h *Host) server(name string) *server {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.byName[name]
}

// ServerStatus is what /v1/mcp/servers reports of a server: nothing of
// its command line, environment, URL or headers, which may hold secrets.
type ServerStatus struct {
	Name      string `json:"name"`
	State     State  `json:"state"`
	Transport string `json:"transport"`
	ToolCount int    `json:"tool_count"`
	// LastError is why the server last failed (with the tail of a stdio
	// server's stderr); it stays after a restart succeeds.
	LastError string `json:"last_error,omitempty"`
	PID       int    `json:"pid,omitempty"` // a running stdio server's process
	Restarts  int    `json:"restarts"`
	// Node is the cluster node that runs the server ("" from a lone host).
	Node string `json:"node,omitempty"`
	// Nodes are the nodes the configuration names to run it (empty:
	// every node).
	Nodes []string `json:"nodes,omitempty"`
}

// Servers reports every server, by name.
func (h *Host) Servers() []ServerStatus {
	servers, remote := h.snapshot()
	out := make([]ServerStatus, 0, len(servers)+len(remote))
	for _, s := range servers {
		out = append(out, s.status())
	}
	for _, sc := range remote {
		out = append(out, ServerStatus{Name: sc.Name, State: StateRemote, Transport: sc.Transport(), Nodes: sc.Nodes})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Tool is a tool of a ready server under its host-wide name.
type Tool struct {
	// Name is unique across servers: the server's own name for the tool,
	// or server__tool when another ready server has a tool of that name.
	Name        string
	Server      string // the server's name in the configuration
	ServerTool  string // the tool's name on its server
	Title       string
	Description string
	InputSchema any
}

// Tools lists the tools of the ready servers, sorted by name. A tool whose
// name two servers share is listed as server__tool for each of them, so a
// name can change when a second server with the same tool becomes ready;
// server__tool is accepted by Call for every tool, colliding or not.
func (h *Host) Tools() []Tool {
	var all []Tool
	servers, _ := h.snapshot()
	for _, s := range servers {
		for _, t := range s.readyTools() {
			all = append(all, Tool{Server: s.cfg.Name, ServerTool: t.Name, Title: t.Title,
				Description: t.Description, InputSchema: t.InputSchema})
		}
	}
	return UniqueNames(all)
}

// UniqueNames names each tool (Server and ServerTool set) by the rule of
// Tools and sorts them by name.
func UniqueNames(all []Tool) []Tool {
	count := map[string]int{}
	for _, t := range all {
		count[t.ServerTool]++
	}
	for i := range all {
		all[i].Name = all[i].ServerTool
		if count[all[i].ServerTool] > 1 {
			all[i].Name = QualifiedName(all[i].Server, all[i].ServerTool)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}

// QualifiedName is the name of a server's tool that never collides.
func QualifiedName(server, tool string) string { return server + "__" + tool }

// Errors of Call that callers branch on.
var (
	// ErrToolNotFound: no ready server has a tool of that name (and no
	// server is starting that might).
	ErrToolNotFound = errors.New("tool not found")
	// ErrNotReady: the tool's server is configured but not ready (starting
	// or failed); the wrapping message says why.
	ErrNotReady = errors.New("mcp server not ready")
)

// ArgumentError is arguments that do not match the tool's input schema.
type ArgumentError struct {
	Path string // the offending field: "arguments" or "arguments.a.b"
	Msg  string
}

func (e *ArgumentError) Error() string { return e.Path + ": " + e.Msg }

// CallError is a call that failed in transport: the server went away,
// answered with a protocol error, or did not answer in time. A tool that
// ran and reported an error is not one: its result has IsError set.
type CallError struct {
	Server, Tool string
	Timeout      bool // the call timeout passed
	Err          error
}

func (e *CallError) Error() string {
	if e.Timeout {
		return fmt.Sprintf("mcp server %q: tool %q: no answer within the call timeout: %v", e.Server, e.Tool, e.Err)
	}
	return fmt.Sprintf("mcp server %q: tool %q: %v", e.Server, e.Tool, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// Resolve finds the tool a host-wide name stands for.
func (h *Host) Resolve(name string) (Tool, error) {
	for _, t := range h.Tools() {
		if t.Name == name || QualifiedName(t.Server, t.ServerTool) == name {
			return t, nil
		}
	}
	// Not listed: a server that is not ready may own it under a
	// qualified name; say so rather than "not found".
	if srv, _, ok := strings.Cut(name, "__"); ok {
		if s := h.server(srv); s != nil {
			st := s.status()
			return Tool{}, fmt.Errorf("%w: %q is %s%s", ErrNotReady, srv, st.State, reason(st.LastError))
		}
		_, remote := h.snapshot()
		for _, sc := range remote {
			if sc.Name == srv {
				return Tool{}, fmt.Errorf("%w: %q runs on %s only", ErrNotReady, srv, strings.Join(sc.Nodes, ", "))
			}
		}
	}
	return Tool{}, fmt.Errorf("%w: %q", ErrToolNotFound, name)
}

func reason(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// Call validates args against the tool's input schema and calls it,
// bounded by the call timeout. It returns the server's result (IsError
// set for a tool error), or an *ArgumentError, a *CallError, or an error
// wrapping ErrToolNotFound / ErrNotReady.
func (h *Host) Call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, Tool, error) {
	t, err := h.Resolve(name)
	if err != nil {
		return nil, Tool{}, err
	}
	s := h.server(t.Server)
	if s == nil { // removed by an Update since
		return nil, Tool{}, fmt.Errorf("%w: %q", ErrToolNotFound, name)
	}
	cs, conn, schema, err := s.callable(t.ServerTool)
	if err != nil {
		return nil, t, err
	}
	if args == nil {
		args = map[string]any{}
	}
	if schema != nil {
		if err := schema.Validate(toJSONValue(args)); err != nil {
			return nil, t, argumentError(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: t.ServerTool, Arguments: args})
	if err != nil {
		timeout := errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		if !timeout && ctx.Err() != nil {
			return nil, t, ctx.Err() // the caller went away
		}
		if !timeout && !answered(err) {
			err = conn.explain(err) // did the server die under the call?
			// The transport broke (a process that died ends its session
			// by itself, an HTTP server that went away may not): end the
			// session so the supervisor reconnects, with backoff.
			go func() { _ = cs.Close() }()
		}
		err = errors.New(s.cfg.redact(err.Error()))
		return nil, t, &CallError{Server: t.Server, Tool: t.ServerTool, Timeout: timeout, Err: err}
	}
	return res, t, nil
}

// server is one configured MCP server and its supervisor's state.
type server struct {
	cfg      ServerConfig // resolved
	written  ServerConfig // as written: an Update that leaves it equal leaves the server be
	startErr error        // resolving the entry failed: it is failed and never started
	opts     *Options
	log      *slog.Logger

	ctx    context.Context // cancelled to stop this server alone
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned

	relist chan struct{} // the server said its tool list changed

	mu       sync.Mutex
	state    State
	lastErr  string
	session  *mcp.ClientSession
	conn     *conn // the ready session's connection
	tools    []*mcp.Tool
	schemas  map[string]*jsonschema.Schema
	restarts int
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServerStatus{Name: s.cfg.Name, State: s.state, Transport: s.cfg.Transport(), LastError: s.lastErr, Restarts: s.restarts, Nodes: s.cfg.Nodes}
	if s.state == StateReady {
		st.ToolCount = len(s.tools)
		st.PID = s.conn.pid()
	}
	return st
}

func (s *server) readyTools() []*mcp.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateReady {
		return nil
	}
	return s.tools
}

func (s *server) callable(tool string) (*mcp.ClientSession, *conn, *jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateReady {
		return nil, nil, nil, fmt.Errorf("%w: %q is %s%s", ErrNotReady, s.cfg.Name, s.state, reason(s.lastErr))
	}
	return s.session, s.conn, s.schemas[tool], nil
}

// codeRejected is the SDK's JSON-RPC code for a message its transport
// could not send (a connection refused, a pipe closed): not an answer.
const codeRejected = -32005

// answered reports whether err is an error the server sent back, as
// opposed to one of the transport.
func answered(err error) bool {
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr) && rpcErr.Code != codeRejected
}

// explain adds how a stdio server's process ended to a call's error when
// the call failed because it did (the server killed mid-call).
func (c *conn) explain(err error) error {
	if st := c.exitStatus(c.grace); st != "" {
		return fmt.Errorf("%w (server %s)", err, st)
	}
	return err
}

func (s *server) setState(st State, errMsg string) {
	s.mu.Lock()
	s.state = st
	if errMsg != "" {
		s.lastErr = errMsg
	}
	if st != StateReady {
		s.session, s.conn, s.tools, s.schemas = nil, nil, nil, nil
	}
	s.mu.Unlock()
}

// stop stops the server and waits until it is gone.
func (s *server) stop() {
	s.cancel()
	<-s.done
}

// run keeps the server running until ctx is done.
func (s *server) run(ctx context.Context) {
	if s.startErr != nil {
		s.setState(StateFailed, s.startErr.Error())
		s.log.Warn("mcp server not started", "err", s.startErr)
		<-ctx.Done()
		s.setState(StateStopped, "")
		return
	}
	backoff := s.opts.MinBackoff
	for {
		s.setState(StateStarting, "")
		began := time.Now()
		err := s.session1(ctx)
		if ctx.Err() != nil {
			s.setState(StateStopped, "")
			s.log.Info("mcp server stopped")
			return
		}
		if time.Since(began) > s.opts.MaxBackoff {
			backoff = s.opts.MinBackoff
		}
		msg := s.cfg.redact(err.Error())
		s.setState(StateFailed, msg)
		s.log.Warn("mcp server failed; restarting", "err", msg, "backoff", backoff)
		select {
		case <-ctx.Done():
			s.setState(StateStopped, "")
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
	}
}

// session1 runs one session: connect, list tools, serve calls until the
// session ends or ctx is done. It always returns an error saying why the
// session is over.
func (s *server) session1(ctx context.Context) error {
	conn, err := s.dial()
	if err != nil {
		return err
	}
	defer conn.stop()
	client := mcp.NewClient(&mcp.Implementation{Name: "fusion", Version: s.opts.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
	})
	// The session's context lives as long as the session (an SSE
	// transport's stream hangs on it); the start timeout cancels it only
	// while the server is starting.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(s.opts.StartTimeout, cancel)
	cs, err := client.Connect(sctx, conn.transport, nil)
	if err == nil {
		if err = s.listTools(sctx, cs, conn); err != nil {
			_ = cs.Close()
		}
	}
	if !timer.Stop() && ctx.Err() == nil {
		err = fmt.Errorf("no answer within the start timeout (%v): %w", s.opts.StartTimeout, errOrCanceled(err))
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return conn.describe(fmt.Errorf("start: %w", err))
	}
	s.log.Info("mcp server ready", "transport", s.cfg.Transport(), "tools", len(s.readyTools()), "pid", conn.pid())

	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	for {
		select {
		case <-ctx.Done():
			s.setState(StateStopped, "")
			_ = cs.Close()
			<-ended
			return ctx.Err()
		case err := <-ended:
			_ = cs.Close()
			return conn.describe(fmt.Errorf("session ended: %s", errOr(err, "closed by the server")))
		case <-s.relist:
			lctx, lcancel := context.WithTimeout(sctx, s.opts.StartTimeout)
			if err := s.listTools(lctx, cs, conn); err != nil && ctx.Err() == nil {
				s.log.Warn("mcp server: listing changed tools failed", "err", err)
			}
			lcancel()
		}
	}
}

func errOrCanceled(err error) error {
	if err == nil {
		return context.Canceled
	}
	return err
}

func errOr(err error, msg string) string {
	if err == nil {
		return msg
	}
	return err.Error()
}

// listTools lists every page of the server's tools, compiles their input
// schemas and makes the server ready with them.
func (s *server) listTools(ctx context.Context, cs *mcp.ClientSession, c *conn) error {
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, t)
	}
	schemas := map[string]*jsonschema.Schema{}
	for _, t := range tools {
		sch, err := compileSchema(t.InputSchema)
		if err != nil {
			// The server validates its own arguments; we just cannot
			// answer a 400 before calling it.
			s.log.Warn("mcp server: tool input schema not usable; arguments go unchecked", "tool", t.Name, "err", err)
			continue
		}
		schemas[t.Name] = sch
	}
	s.mu.Lock()
	s.state, s.session, s.conn, s.tools, s.schemas = StateReady, cs, c, tools, schemas
	s.mu.Unlock()
	return nil
}

// conn is one connection attempt's transport and, for stdio, the
// process it started.
type conn struct {
	transport mcp.Transport
	cmd       *exec.Cmd   // stdio only
	stderr    *tailWriter // stdio only
	stdin     *os.File    // our end of the child's stdin
	exited    chan struct{}
	exitErr   error // cmd.Wait's result, set before exited is closed
	grace     time.Duration
}

func (c *conn) pid() int {
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// exitStatus waits up to d for a stdio server's process to exit and says
// how it ended ("" if it has not, or for HTTP).
func (c *conn) exitStatus(d time.Duration) string {
	if c.cmd == nil {
		return ""
	}
	select {
	case <-c.exited:
	case <-time.After(d):
		return ""
	}
	if c.exitErr == nil {
		return "process exited with status 0"
	}
	return "process " + c.exitErr.Error()
}

// describe adds a stdio server's exit status and stderr tail to err.
func (c *conn) describe(err error) error {
	if c.cmd == nil {
		return err
	}
	msg := err.Error()
	if st := c.exitStatus(c.grace); st != "" {
		msg += "; " + st
	}
	if tail := c.stderr.Tail(); tail != "" {
		msg += "; stderr: " + tail
	}
	return errors.New(msg)
}

// stop makes sure nothing the connection started outlives it. A stdio
// server has had its stdin closed (by the session's Close); it gets the
// grace period to exit, then SIGTERM and, a grace period later, SIGKILL,
// both to its whole process group (npx and shell wrappers start children
// of their own).
func (c *conn) stop() {
	if c.cmd == nil {
		return
	}
	_ = c.stdin.Close()
	pid := c.cmd.Process.Pid
	if c.exitStatus(c.grace) == "" {
		signalGroup(pid, syscall.SIGTERM)
		if c.exitStatus(c.grace) == "" {
			signalGroup(pid, syscall.SIGKILL)
		}
	}
	<-c.exited
	signalGroup(pid, syscall.SIGKILL) // what the leader left behind
}

func (s *server) dial() (*conn, error) {
	switch s.cfg.Transport() {
	case TransportStdio:
		return s.startProcess()
	case TransportSSE:
		return &conn{transport: &mcp.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: headerClient(s.cfg.Headers)}}, nil
	default:
		return &conn{transport: &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: headerClient(s.cfg.Headers)}}, nil
	}
}

// startProcess starts a stdio server over pipes of our own (so waiting
// for the process never races with the session reading them) and reaps
// it in the background.
func (s *server) startProcess() (*conn, error) {
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	cmd.Dir = s.cfg.Cwd
	cmd.Env = os.Environ()
	for k, v := range s.cfg.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	tail := newTailWriter(s.opts.StderrTail, s.log, s.cfg.redact)
	cmd.Stderr = tail
	// A grandchild holding stderr open must not keep Wait from returning.
	cmd.WaitDelay = s.opts.TerminateGrace
	ownGroup(cmd)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	c := &conn{cmd: cmd, stderr: tail, stdin: inW, exited: make(chan struct{}), grace: s.opts.TerminateGrace,
		transport: &mcp.IOTransport{Reader: outR, Writer: inW}}
	go func() {
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}
