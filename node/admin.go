package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fusion/cluster"
	"fusion/cluster/adminremote"
	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/mcp/host"
	"fusion/router/admin"
	"fusion/router/dispatch"
	"fusion/router/metrics"
	"fusion/store"
)

// Node-local buckets of node.db.
const (
	bucketSettings = "settings" // a lone node's settings (a cluster keeps them in Raft)
	bucketStats    = "stats"    // the all-time counters
	bucketProfiles = "profiles" // a lone node's benchmark profiles, by model and kind
	keyAllTime     = "alltime"
	// bucketGlobal keeps the last replicated global overrides this node
	// applied, so its next start can put the restart-only ones in force
	// before anything reads the configuration (see StoredGlobalOverrides).
	bucketGlobal = "global"
	keyOverrides = "overrides"
)

// statsSaveEvery is how often the all-time counters are written to
// node.db (and once more at Stop).
const statsSaveEvery = 10 * time.Second

// openNodeDB opens <data-dir>/node.db (nil without a data dir).
func openNodeDB(dataDir string) (*store.NodeDB, error) {
	if dataDir == "" {
		return nil, nil
	}
	db, err := store.OpenNodeDB(filepath.Join(dataDir, "node.db"), 0)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return db, nil
}

// soloSettings are a lone node's settings: in node.db (in memory without
// a data dir), applied as soon as they are written.
type soloSettings struct {
	mu       sync.Mutex
	vals     map[string][]byte
	db       *store.NodeDB
	onChange func()
}

func newSoloSettings(db *store.NodeDB, onChange func()) (*soloSettings, error) {
	s := &soloSettings{vals: map[string][]byte{}, db: db, onChange: onChange}
	if db != nil {
		all, err := db.All(bucketSettings)
		if err != nil {
			return nil, err
		}
		s.vals = all
	}
	return s, nil
}

func (s *soloSettings) Setting(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vals[key]
	return v, ok
}

func (s *soloSettings) Settings(prefix string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.vals {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

func (s *soloSettings) PutSetting(_ context.Context, key string, value []byte) error {
	if s.db != nil {
		if err := s.db.Put(bucketSettings, key, value); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.vals[key] = append([]byte{}, value...)
	s.mu.Unlock()
	s.onChange()
	return nil
}

// clusterSettings are the settings in the Raft state: a write goes
// through the leader and every node applies it (see watchSettings).
type clusterSettings struct{ m *cluster.Member }

func (c clusterSettings) Setting(key string) ([]byte, bool) {
	var (
		s  *pb.Setting
		ok bool
	)
	c.m.FSM().Read(func(st *fsm.State) { s, ok = st.Setting(key) })
	if !ok {
		return nil, false
	}
	return s.Value, true
}

func (c clusterSettings) Settings(prefix string) map[string][]byte {
	out := map[string][]byte{}
	c.m.FSM().Read(func(st *fsm.State) {
		for _, s := range st.Settings() {
			if strings.HasPrefix(s.Key, prefix) {
				out[s.Key] = s.Value
			}
		}
	})
	return out
}

func (c clusterSettings) PutSetting(ctx context.Context, key string, value []byte) error {
	_, err := c.m.Apply(ctx, &pb.SettingPut{Key: key, Value: value})
	return err
}

// adminState is what the node keeps for the admin API: the settings in
// force (aliases, completions-as-chat models) and the admin handler peers
// call into.
type adminState struct {
	store   admin.Store
	aliases atomic.Pointer[map[string]string] // alias → model id
	asChat  atomic.Pointer[map[string]bool]
	// fallback names the models with cloud_fallback.
	fallback atomic.Pointer[map[string]bool]
	handler  atomic.Pointer[admin.Handler]
	applyMu  sync.Mutex // one applySettings at a time
	// mcpApplied is the stored MCP configuration last put in force
	// (under applyMu).
	mcpApplied []byte
}

// applySettings puts the stored settings in force on this node: each
// model's settings into the engine pool, the aliases and
// completions-as-chat models into the frontend, the global overrides into
// the live configuration.
func (n *Node) applySettings() {
	a := n.admin
	a.applyMu.Lock()
	defer a.applyMu.Unlock()
	aliases, asChat, fallback := map[string]string{}, map[string]bool{}, map[string]bool{}
	for k, v := range a.store.Settings(admin.ModelSettingsPrefix) {
		id := strings.TrimPrefix(k, admin.ModelSettingsPrefix)
		s := admin.DecodeModelSettings(v)
		n.runner.SetModelSettings(id, s.Runner())
		if s.Alias != "" {
			aliases[s.Alias] = id
		}
		if s.CompletionsAsChat {
			asChat[id] = true
		}
		if s.CloudFallback {
			fallback[id] = true
		}
	}
	a.aliases.Store(&aliases)
	a.asChat.Store(&asChat)
	a.fallback.Store(&fallback)
	n.applyCloud()
	if b, ok := a.store.Setting(admin.GlobalSettingsKey); ok {
		n.global.apply(admin.DecodeGlobalOverrides(b))
		n.keepGlobalOverrides(b)
	}
	n.applyMCP()
}

// keepGlobalOverrides writes the overrides (raw, as stored) to node.db
// when they changed since the last write.
func (n *Node) keepGlobalOverrides(b []byte) {
	if n.db == nil {
		return
	}
	if old, ok, err := n.db.Get(bucketGlobal, keyOverrides); err == nil && ok && bytes.Equal(old, b) {
		return
	}
	if err := n.db.Put(bucketGlobal, keyOverrides, b); err != nil {
		n.cfg.Logger.Warn("global overrides not kept for the next start", "err", err)
	}
}

// StoredGlobalOverrides returns the replicated global overrides the node
// with this data dir last applied (nil when it never had any). A program
// calls it before New, while no node holds node.db, to put in force the
// overrides that need a restart (see Config.Effective).
func StoredGlobalOverrides(dataDir string) (map[string]string, error) {
	path := filepath.Join(dataDir, "node.db")
	if dataDir == "" {
		return nil, nil
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	db, err := store.OpenNodeDB(path, 0)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	defer db.Close()
	b, ok, err := db.Get(bucketGlobal, keyOverrides)
	if err != nil || !ok {
		return nil, err
	}
	return admin.DecodeGlobalOverrides(b), nil
}

// applyMCP puts the stored MCP configuration in force on this node, once
// there is one (until then the --mcp-config file is): servers added,
// dropped or changed are started, stopped or restarted, the others left
// running. Called under applyMu.
func (n *Node) applyMCP() {
	a := n.admin
	b, ok := a.store.Setting(fsm.MCPConfigKey)
	if !ok || bytes.Equal(b, a.mcpApplied) {
		return
	}
	a.mcpApplied = bytes.Clone(b)
	cfg, err := host.ParseRaw(b)
	if err != nil { // checked before it was written; never expected
		n.cfg.Logger.Warn("stored mcp configuration not usable; the servers stay as they are", "err", err)
		return
	}
	n.mcp.Update(cfg)
}

// nodeMCP is the admin API's view of the MCP configuration: stored in
// the Raft state in a cluster, in node.db on a lone node.
type nodeMCP struct {
	n       *Node
	servers func() []host.ServerStatus // every node's, in a cluster
}

func (m nodeMCP) MCPConfig() (host.Config, string) {
	if b, ok := m.n.admin.store.Setting(fsm.MCPConfigKey); ok {
		if cfg, err := host.ParseRaw(b); err == nil {
			if m.n.member != nil {
				return cfg, "cluster"
			}
			return cfg, "node"
		}
	}
	return m.n.cfg.MCPServers, "file"
}

func (m nodeMCP) PutMCPConfig(ctx context.Context, doc []byte) error {
	if m.n.member != nil {
		_, err := m.n.member.Apply(ctx, &pb.MCPConfigPut{Config: doc})
		return err
	}
	return m.n.admin.store.PutSetting(ctx, fsm.MCPConfigKey, doc)
}

func (m nodeMCP) Servers() []host.ServerStatus { return m.servers() }

// watchSettings applies the settings whenever the Raft state changes them
// on this node, until ctx ends. The FSM's callback only signals: it runs
// on the apply path, which must not wait on a read of the state.
func (n *Node) watchSettings(ctx context.Context) {
	kick := make(chan struct{}, 1)
	cancel := n.member.FSM().Subscribe(func(cs []fsm.Change) {
		for _, c := range cs {
			if c.Table == fsm.TableSettings || c.Table == fsm.TableAll {
				select {
				case kick <- struct{}{}:
				default:
				}
				return
			}
		}
	})
	defer cancel()
	n.applySettings()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			n.applySettings()
		}
	}
}

// resolve maps an alias to its model id.
func (a *adminState) resolve(model string) string {
	if m := a.aliases.Load(); m != nil {
		if id, ok := (*m)[model]; ok {
			return id
		}
	}
	return model
}

func (a *adminState) completionsAsChat(model string) bool {
	if m := a.asChat.Load(); m != nil {
		return (*m)[a.resolve(model)]
	}
	return false
}

// aliasEngine is the frontend's engine: the dispatcher, with a model's
// alias replaced by its id first (so a forwarded request carries the id).
type aliasEngine struct {
	*dispatch.Dispatcher
	a *adminState
}

func (e aliasEngine) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.Generate(ctx, req)
}

func (e aliasEngine) Tokenize(ctx context.Context, model string, req prompt.Request) (prompt.Result, error) {
	return e.Dispatcher.Tokenize(ctx, e.a.resolve(model), req)
}

func (e aliasEngine) Detokenize(ctx context.Context, model string, ids []int) (string, error) {
	return e.Dispatcher.Detokenize(ctx, e.a.resolve(model), ids)
}

func (e aliasEngine) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.Embed(ctx, req)
}

func (e aliasEngine) Transcribe(ctx context.Context, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.Transcribe(ctx, req)
}

func (e aliasEngine) Speak(ctx context.Context, req *engine.SpeechRequest) (*engine.SpeechResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.Speak(ctx, req)
}

func (e aliasEngine) GenerateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.GenerateImage(ctx, req)
}

func (e aliasEngine) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.Rerank(ctx, req)
}

// adminPeers reaches the other nodes' admin API over the member's gRPC.
type adminPeers struct{ n *Node }

func (p adminPeers) grpcOf(node string) (string, bool) {
	for _, m := range p.n.member.Members() {
		if m.ID == node && m.GRPC != "" && m.Status == cluster.StatusAlive {
			return m.GRPC, true
		}
	}
	return "", false
}

func (p adminPeers) Nodes() []string {
	var out []string
	for _, m := range p.n.member.Members() {
		if m.ID != p.n.member.ID() && m.GRPC != "" && m.Status == cluster.StatusAlive {
			out = append(out, m.ID)
		}
	}
	sort.Strings(out)
	return out
}

func (p adminPeers) Forward(ctx context.Context, node string, call admin.Call) (admin.Reply, error) {
	addr, ok := p.grpcOf(node)
	if !ok {
		return admin.Reply{}, fmt.Errorf("%w: %q", admin.ErrUnknownNode, node)
	}
	cl, err := p.n.pool.Client(addr)
	if err != nil {
		return admin.Reply{}, err
	}
	return adminremote.Do(ctx, cl.Conn(), call)
}

func (p adminPeers) FollowLogs(ctx context.Context, node, level string, fn func(string)) error {
	addr, ok := p.grpcOf(node)
	if !ok {
		return fmt.Errorf("%w: %q", admin.ErrUnknownNode, node)
	}
	cl, err := p.n.pool.Client(addr)
	if err != nil {
		return err
	}
	return adminremote.FollowLogs(ctx, cl.Conn(), level, fn)
}

// adminLocal is this node's side of the admin service for its peers.
type adminLocal struct{ n *Node }

func (l adminLocal) Do(ctx context.Context, call adminremote.Call) (adminremote.Reply, error) {
	h := l.n.admin.handler.Load()
	if h == nil {
		return adminremote.Reply{}, adminremote.ErrNoLocal
	}
	return h.Serve(ctx, call)
}

func (l adminLocal) FollowLogs(ctx context.Context, level string, fn func(string)) error {
	if l.n.cfg.Logs == nil {
		return fmt.Errorf("node %s keeps no log file", l.n.member.ID())
	}
	if err := l.n.cfg.Logs.CheckLevel(level); err != nil {
		return err
	}
	return l.n.cfg.Logs.Follow(ctx, level, fn)
}

// engineFigures are the engine's live figures for the admin stats.
func (n *Node) engineFigures() admin.EngineFigures {
	s := n.runner.Stats()
	f := admin.EngineFigures{Queued: s.Waiting, RAMTotal: n.runner.MemoryTotal(), RAMFree: n.runner.MemoryFree(),
		WeightBytes: s.WeightBytes, KVBytes: s.KVBytes, PeakBytes: s.PeakBytes, PrefixCache: n.runner.CacheStats()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := n.runner.MLXMemory(ctx); err == nil {
		f.MLX = &admin.MLXMemory{Active: m.Active, Peak: m.Peak, Cache: m.Cache}
	}
	return f
}

// restoreAllTime loads the persisted all-time counters into m.
func (n *Node) restoreAllTime(m *metrics.Metrics) error {
	if n.db == nil {
		return nil
	}
	b, ok, err := n.db.Get(bucketStats, keyAllTime)
	if err != nil || !ok {
		return err
	}
	var c metrics.Counters
	if err := json.Unmarshal(b, &c); err != nil {
		n.cfg.Logger.Warn("all-time stats unreadable, starting from zero", "err", err)
		return nil
	}
	m.RestoreAllTime(c)
	return nil
}

// persistAllTime writes the all-time counters to node.db.
func (n *Node) persistAllTime(c metrics.Counters) error {
	if n.db == nil {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return n.db.Put(bucketStats, keyAllTime, b)
}

// saveStatsLoop persists the all-time counters every statsSaveEvery and
// records a point of the stats history (the panel's last hour) every
// admin.HistoryEvery, from the start, until ctx ends.
func (n *Node) saveStatsLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(statsSaveEvery)
	defer t.Stop()
	hist := time.NewTicker(admin.HistoryEvery)
	defer hist.Stop()
	record := func() {
		if h := n.admin.handler.Load(); h != nil {
			h.RecordHistory(time.Now())
		}
	}
	record()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := n.persistAllTime(n.router.Metrics().AllTime()); err != nil {
				n.cfg.Logger.Warn("saving the all-time stats", "err", err)
			}
		case <-hist.C:
			record()
		}
	}
}

// cloudFallback reports whether model has cloud_fallback.
func (a *adminState) cloudFallback(model string) bool {
	if m := a.fallback.Load(); m != nil {
		return (*m)[model]
	}
	return false
}

func (e aliasEngine) DetectSpeech(ctx context.Context, req *engine.VADRequest) (*engine.VADResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.DetectSpeech(ctx, req)
}

func (e aliasEngine) Denoise(ctx context.Context, req *engine.DenoiseRequest) (*engine.DenoiseResult, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	return e.Dispatcher.Denoise(ctx, req)
}
