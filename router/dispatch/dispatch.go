// Package dispatch is the router's engine.Generator in a cluster: for each
// request it serves locally when the model is ready on this node, else
// picks a peer that has it ready — session affinity, then prefix affinity
// (both by bounded-load consistent hashing, so every frontend agrees),
// then load — and forwards the neutral request to it. It retries another
// node only while nothing has been sent to the client (the peer refused,
// was unreachable or overloaded at admission), never after the first
// event.
//
// The dispatcher knows the cluster only through Table (who has which
// model ready, and their load) and Connector (an engine.Generator per peer
// address), so it imports neither the cluster nor gRPC.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/router/servedby"
)

// Peer is a node as the routing table sees it.
type Peer struct {
	ID       string
	Addr     string // address of its Engine gRPC service
	Alive    bool   // memberlist says alive
	Draining bool   // leaving: takes no new requests
	// Load is its in-flight + queued generations, from its stats stream.
	Load int64
}

// Table is the routing table: what the cluster knows about where models
// are ready. It must be cheap and never block on the Raft leader.
type Table interface {
	// Self is this node's id.
	Self() string
	// Candidates lists the nodes (this one included) where model is
	// ready to serve now.
	Candidates(model string) []Peer
	// Known reports whether model exists in the cluster even where it is
	// not ready (placed but loading, or on some node's disk).
	Known(model string) bool
	// Peers lists the other nodes, for merged model lists.
	Peers() []Peer
	// Unheard lists the alive peers whose current inventory (the models
	// on their disks) this node has not heard yet. While there are any,
	// a model the table does not know may be on their disks, and the
	// dispatcher asks them before it answers "no such model".
	Unheard() []Peer
}

// BackendTable is a Table that knows which compute backend (mlx, cpu) a
// node runs a model on; the dispatcher asks it only for requests that
// name a backend (engine.Request.Backend).
type BackendTable interface {
	// Backend is the backend node runs model on ("" when unknown).
	Backend(node, model string) string
	// Holders lists the usable nodes that have model loaded or on disk:
	// where a request for a backend goes when none of the nodes that
	// have it ready runs it on that backend.
	Holders(model string) []Peer
}

// PlacedTable is a Table that knows models served only where they are
// placed (a model sharded into pipeline stages): a miss on one is a 503
// while its pipeline is not ready, never a whole copy loaded here.
type PlacedTable interface {
	PlacedOnly(model string) bool
}

// FitTable is a Table that knows models no node can take whole (a
// cluster planning by memory budgets): Unfit's error refuses a miss on
// one before anything loads.
type FitTable interface {
	Unfit(model string) error
}

// Connector gives the engine of a peer, by the address of its Engine
// service (remote.Pool implements it).
type Connector interface {
	Engine(addr string) (engine.Generator, error)
}

// Config configures a Dispatcher. Zero values take the defaults noted.
type Config struct {
	Local   engine.Generator // this node's engine
	Table   Table
	Connect Connector
	// LoadFactor is CHWBL's c: no node takes a request above c times the
	// average load while another can (default 1.25).
	LoadFactor float64
	// VirtualNodes per node on the hash ring (default 256).
	VirtualNodes int
	// PrefixBytes of the prompt (tools, then messages as JSON, or the raw
	// prompt) make its affinity key (default 1024), hashed in chunks of
	// PrefixChunk bytes (default 256).
	PrefixBytes, PrefixChunk int
	// MaxAttempts bounds the nodes one request tries (default 3).
	MaxAttempts int
	// PeerTimeout bounds a peer's answer to Models (default 2 s), for a
	// merged model list and for asking the Unheard peers about a model
	// the table does not know.
	PeerTimeout time.Duration
	// StrictPlacement, when set, never serves a model that no node has
	// ready from the local engine; by default a node that has the model
	// on disk loads it (a lone node is a full server).
	StrictPlacement bool
	// OnMiss, when set, is called (without blocking) for a request whose
	// model no node has ready, to ask the placement planner to load it.
	OnMiss func(model string)
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.LoadFactor <= 1 {
		c.LoadFactor = 1.25
	}
	if c.VirtualNodes <= 0 {
		c.VirtualNodes = DefaultVirtualNodes
	}
	if c.PrefixBytes <= 0 {
		c.PrefixBytes = 1024
	}
	if c.PrefixChunk <= 0 {
		c.PrefixChunk = 256
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.PeerTimeout <= 0 {
		c.PeerTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Dispatcher implements engine.Generator over the local engine and the
// peers. It is safe for concurrent use.
type Dispatcher struct {
	cfg Config

	mu          sync.Mutex
	outstanding map[string]int64 // generations this frontend has running, per node
	rings       map[string]*Ring // by the sorted node ids

	local, forwarded, retried, refused atomic.Int64
}

// New returns a dispatcher.
func New(cfg Config) *Dispatcher {
	cfg.defaults()
	return &Dispatcher{cfg: cfg, outstanding: map[string]int64{}, rings: map[string]*Ring{}}
}

// Stats are the dispatcher's counters.
type Stats struct {
	Local     int64 // generations served by this node
	Forwarded int64 // generations served by a peer
	Retried   int64 // attempts that failed before the first event and moved on
	Refused   int64 // requests no node took
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{Local: d.local.Load(), Forwarded: d.forwarded.Load(), Retried: d.retried.Load(), Refused: d.refused.Load()}
}

type sessionKey struct{}

// WithSession returns ctx carrying the session id of the request: requests
// of one session go to the same node while it has room (its KV cache holds
// the conversation).
func WithSession(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, sessionKey{}, id)
}

// SessionFrom returns the session id in ctx, or "".
func SessionFrom(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}

// Generate runs req on the best node that takes it.
func (d *Dispatcher) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	cands := usable(d.cfg.Table.Candidates(req.Model))
	if len(cands) == 0 {
		return d.miss(ctx, req)
	}
	if req.Backend != "" {
		var err error
		if cands, err = d.onBackend(req, cands); err != nil {
			d.refused.Add(1)
			return nil, err
		}
	}
	return d.runOn(ctx, req, cands)
}

// onBackend keeps the candidates that run req's model on req.Backend,
// adding the nodes that would load it — except for a model placed only as
// a pipeline, which runs on its first stage or not at all. This node
// stays when its backend is not known here (its runner checks); a peer
// whose backend is not known is dropped, since it would not check.
func (d *Dispatcher) onBackend(req *engine.Request, cands []Peer) ([]Peer, error) {
	bt, _ := d.cfg.Table.(BackendTable)
	// A model placed only as a pipeline runs where its first stage is:
	// another holder would load a whole copy.
	placed, _ := d.cfg.Table.(PlacedTable)
	pipelined := placed != nil && placed.PlacedOnly(req.Model)
	if bt != nil && !pipelined {
		// Ready nodes first (in their order), then those that would load it.
		for _, p := range usable(bt.Holders(req.Model)) {
			if !slices.ContainsFunc(cands, func(c Peer) bool { return c.ID == p.ID }) {
				cands = append(cands, p)
			}
		}
	}
	self := d.cfg.Table.Self()
	var keep []Peer
	var seen []string
	for _, p := range cands {
		be := ""
		if bt != nil {
			be = bt.Backend(p.ID, req.Model)
		}
		if be == req.Backend || (be == "" && p.ID == self) {
			keep = append(keep, p)
			continue
		}
		if be == "" {
			be = "unknown"
		}
		seen = append(seen, p.ID+": "+be)
	}
	switch {
	case len(keep) == 0 && pipelined:
		return nil, fmt.Errorf("%w: %q is sharded into pipeline stages and runs where its first stage is (%s), not on the %s backend (backend_override); a whole copy is not loaded elsewhere",
			engine.ErrUnavailable, req.Model, strings.Join(seen, ", "), req.Backend)
	case len(keep) == 0:
		return nil, fmt.Errorf("%w: no node runs %q on the %s backend (backend_override); where it runs: %s",
			engine.ErrUnavailable, req.Model, req.Backend, strings.Join(seen, ", "))
	}
	return keep, nil
}

// runOn runs req on the first of cands, in dispatch order, that takes it.
func (d *Dispatcher) runOn(ctx context.Context, req *engine.Request, cands []Peer) (<-chan engine.Event, error) {
	self := d.cfg.Table.Self()
	order := d.order(ctx, req, self, cands)
	a := &attempt{d: d, ctx: ctx, req: req, self: self, order: order[:min(len(order), d.cfg.MaxAttempts)]}
	node, ch, err := a.next()
	if err != nil {
		d.refused.Add(1)
		return nil, err
	}
	return a.run(node, ch), nil
}

// attempt is one request going down its ordered nodes.
type attempt struct {
	d     *Dispatcher
	ctx   context.Context
	req   *engine.Request
	self  string
	order []Peer // nodes not tried yet
	tried int
}

// next admits the request on the first node of the order that takes it.
func (a *attempt) next() (Peer, <-chan engine.Event, error) {
	d := a.d
	var last error
	for len(a.order) > 0 {
		p := a.order[0]
		a.order = a.order[1:]
		if a.tried++; a.tried > 1 {
			d.retried.Add(1)
		}
		gen, err := d.engineOf(a.self, p)
		var ch <-chan engine.Event
		if err == nil {
			ch, err = gen.Generate(a.ctx, a.req)
		}
		if err == nil {
			if p.ID == a.self {
				d.local.Add(1)
			} else {
				d.forwarded.Add(1)
			}
			servedby.Report(a.ctx, p.ID)
			return p, ch, nil
		}
		if a.ctx.Err() != nil {
			return Peer{}, nil, a.ctx.Err()
		}
		last = err
		if !retryable(err) {
			break
		}
		d.cfg.Logger.LogAttrs(a.ctx, slog.LevelWarn, "dispatch: node refused, trying the next",
			slog.String("request_id", a.req.ID), slog.String("model", a.req.Model), slog.String("node", p.ID), slog.String("err", err.Error()))
	}
	return Peer{}, nil, last
}

// run relays the events of the admitted generation, counting it against
// its node. A node that fails before its first event with
// engine.ErrUnavailable (it died or became unreachable; nothing reached
// the client yet) is replaced by the next node of the order; after the
// first event nothing is retried.
func (a *attempt) run(node Peer, in <-chan engine.Event) <-chan engine.Event {
	d := a.d
	d.hold(node.ID, 1)
	out := make(chan engine.Event)
	go func() {
		defer func() { d.hold(node.ID, -1) }()
		defer close(out)
		first := true
		for {
			var (
				ev engine.Event
				ok bool
			)
			select {
			case ev, ok = <-in:
			case <-a.ctx.Done():
				for range in { // the engine stops on ctx; let it finish
				}
				return
			}
			if !ok {
				return
			}
			if first && ev.Err != nil && errors.Is(ev.Err, engine.ErrUnavailable) && len(a.order) > 0 {
				d.cfg.Logger.LogAttrs(a.ctx, slog.LevelWarn, "dispatch: node failed before its first event, trying the next",
					slog.String("request_id", a.req.ID), slog.String("node", node.ID), slog.String("err", ev.Err.Error()))
				if next, ch, err := a.next(); err == nil {
					for range in {
					}
					servedby.Replace(a.ctx, node.ID, next.ID)
					d.hold(node.ID, -1)
					d.hold(next.ID, 1)
					node, in = next, ch
					continue
				} else if a.ctx.Err() != nil {
					return
				}
			}
			first = false
			select {
			case out <- ev:
			case <-a.ctx.Done():
				for range in {
				}
				return
			}
		}
	}()
	return out
}

// retryable: the node did not take the request, and another might.
// Refusals about the request itself (a bad field) would be the same
// everywhere.
func retryable(err error) bool {
	return errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrOverloaded) || errors.Is(err, engine.ErrModelNotFound)
}

// miss handles a model no node has ready.
func (d *Dispatcher) miss(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	if d.cfg.OnMiss != nil {
		go d.cfg.OnMiss(req.Model)
	}
	if f, ok := d.cfg.Table.(FitTable); ok {
		if err := f.Unfit(req.Model); err != nil {
			d.refused.Add(1)
			return nil, err
		}
	}
	placed, _ := d.cfg.Table.(PlacedTable)
	if !d.cfg.StrictPlacement && (placed == nil || !placed.PlacedOnly(req.Model)) {
		ch, err := d.cfg.Local.Generate(ctx, req)
		if err == nil {
			d.local.Add(1)
			self := d.cfg.Table.Self()
			servedby.Report(ctx, self)
			a := &attempt{d: d, ctx: ctx, req: req, self: self, tried: 1}
			return a.run(Peer{ID: self}, ch), nil
		}
		if !errors.Is(err, engine.ErrModelNotFound) {
			return nil, err
		}
	}
	if d.cfg.Table.Known(req.Model) {
		d.refused.Add(1)
		return nil, fmt.Errorf("%w: %q is not ready on any node yet", engine.ErrUnavailable, req.Model)
	}
	have, err := d.ask(ctx, req.Model)
	if err != nil {
		d.refused.Add(1)
		return nil, err
	}
	if len(have) == 0 {
		d.refused.Add(1)
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return d.runOn(ctx, req, have)
}

// ask settles a model the table does not know against the peers whose
// inventory this node has not heard yet: it asks each for its models, at
// once and for at most PeerTimeout, and returns those that have it (none
// when every peer is heard). When none has it and some did not answer,
// the model may be on their disks: an engine.ErrUnavailable (a 503 with
// Retry-After), never a 404.
func (d *Dispatcher) ask(ctx context.Context, model string) ([]Peer, error) {
	self := d.cfg.Table.Self()
	peers := slices.DeleteFunc(usable(d.cfg.Table.Unheard()), func(p Peer) bool { return p.ID == self })
	if len(peers) == 0 {
		return nil, nil
	}
	has := make([]bool, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, d.cfg.PeerTimeout)
			defer cancel()
			gen, err := d.cfg.Connect.Engine(p.Addr)
			var list []engine.ModelInfo
			if err == nil {
				list, err = gen.Models(pctx)
			}
			errs[i] = err
			has[i] = slices.ContainsFunc(list, func(m engine.ModelInfo) bool { return m.ID == model })
		})
	}
	wg.Wait()
	var have []Peer
	var silent []string
	for i, p := range peers {
		switch {
		case has[i]:
			have = append(have, p)
		case errs[i] != nil:
			silent = append(silent, p.ID)
			d.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: a node whose models are not heard yet did not answer",
				slog.String("model", model), slog.String("node", p.ID), slog.String("err", errs[i].Error()))
		}
	}
	if len(have) == 0 && len(silent) > 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %q is not known here yet and %s, whose models this node has not heard yet, did not answer",
			engine.ErrUnavailable, model, strings.Join(silent, ", "))
	}
	return have, nil
}

func (d *Dispatcher) engineOf(self string, p Peer) (engine.Generator, error) {
	if p.ID == self {
		return d.cfg.Local, nil
	}
	return d.cfg.Connect.Engine(p.Addr)
}

// usable keeps the alive nodes that are not draining.
func usable(ps []Peer) []Peer {
	out := ps[:0:0]
	for _, p := range ps {
		if p.Alive && !p.Draining {
			out = append(out, p)
		}
	}
	return out
}

// order sorts the candidates: this node first when it has the model
// ready; then the CHWBL order of the session id, or else of the prompt's
// prefix, under the current loads.
func (d *Dispatcher) order(ctx context.Context, req *engine.Request, self string, cands []Peer) []Peer {
	byID := make(map[string]Peer, len(cands))
	ids := make([]string, 0, len(cands))
	for _, p := range cands {
		if _, dup := byID[p.ID]; !dup {
			ids = append(ids, p.ID)
		}
		byID[p.ID] = p
	}
	out := make([]Peer, 0, len(ids))
	if p, ok := byID[self]; ok {
		out = append(out, p)
		delete(byID, self)
		ids = slices.DeleteFunc(ids, func(id string) bool { return id == self })
	}
	if len(ids) == 0 {
		return out
	}
	ring := d.ring(ids)
	loads := d.loads(byID)
	for _, id := range ring.Order(d.Key(ctx, req), func(id string) int64 { return loads[id] }, d.cfg.LoadFactor) {
		out = append(out, byID[id])
	}
	return out
}

// Key is the affinity key of a request: its session id when it has one,
// else the chained hash of its prompt's prefix.
func (d *Dispatcher) Key(ctx context.Context, req *engine.Request) uint64 {
	if s := SessionFrom(ctx); s != "" {
		return HashString("session\x00" + s)
	}
	chain := PrefixChain(req.Model, promptPrefix(req, d.cfg.PrefixBytes), d.cfg.PrefixBytes, d.cfg.PrefixChunk)
	return chain[len(chain)-1]
}

// promptPrefix is the start of what decides the prompt tokens, in a form
// every node writes the same way: tools and messages as JSON (ordered
// keys), or the raw prompt, or the token ids.
func promptPrefix(req *engine.Request, limit int) []byte {
	var b []byte
	switch {
	case req.Prompt != nil:
		return []byte(*req.Prompt)
	case req.PromptTokens != nil:
		for _, id := range req.PromptTokens {
			if len(b) >= limit {
				break
			}
			b = fmt.Appendf(b, "%d,", id)
		}
		return b
	}
	for _, o := range append(slices.Clip(req.Tools), req.Messages...) {
		if len(b) >= limit {
			break
		}
		j, err := json.Marshal(o)
		if err != nil {
			continue
		}
		b = append(b, j...)
	}
	return b
}

// ring returns the (cached) ring of the given nodes.
func (d *Dispatcher) ring(ids []string) *Ring {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	key := strings.Join(sorted, "\x00")
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.rings[key]; ok {
		return r
	}
	if len(d.rings) >= 64 { // membership changed many times: start over
		clear(d.rings)
	}
	r := NewRing(sorted, d.cfg.VirtualNodes)
	d.rings[key] = r
	return r
}

// loads are the nodes' loads: the larger of what their stats say and
// what this frontend has running there (stats lag).
func (d *Dispatcher) loads(byID map[string]Peer) map[string]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int64, len(byID))
	for id, p := range byID {
		out[id] = max(p.Load, d.outstanding[id])
	}
	return out
}

// hold adds n to the generations this frontend has running on node.
func (d *Dispatcher) hold(node string, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.outstanding[node] += n; d.outstanding[node] <= 0 {
		delete(d.outstanding, node)
	}
}

// Models lists the models of this node and of every peer, merged by id (a
// model is loaded when it is loaded anywhere). Peers that do not answer
// within PeerTimeout are left out.
func (d *Dispatcher) Models(ctx context.Context) ([]engine.ModelInfo, error) {
	local, lerr := d.cfg.Local.Models(ctx)
	peers := usable(d.cfg.Table.Peers())
	lists := make([][]engine.ModelInfo, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		if p.ID == d.cfg.Table.Self() {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, d.cfg.PeerTimeout)
			defer cancel()
			gen, err := d.cfg.Connect.Engine(p.Addr)
			if err == nil {
				lists[i], err = gen.Models(pctx)
			}
			if err != nil {
				d.cfg.Logger.Warn("dispatch: peer models", "node", p.ID, "err", err)
			}
		})
	}
	wg.Wait()
	if lerr != nil && len(peers) == 0 {
		return nil, lerr
	}
	merged := slices.Clone(local)
	at := make(map[string]int, len(merged))
	for i, m := range merged {
		at[m.ID] = i
	}
	for _, l := range lists {
		for _, m := range l {
			if i, ok := at[m.ID]; ok {
				merged[i].Loaded = merged[i].Loaded || m.Loaded
				continue
			}
			at[m.ID] = len(merged)
			merged = append(merged, m)
		}
	}
	slices.SortFunc(merged, func(a, b engine.ModelInfo) int { return strings.Compare(a.ID, b.ID) })
	return merged, nil
}

// Tokenize runs on this node when it has the model, else on a node that
// has it ready (or, for a model the table does not know, on an unheard
// peer that has it; see ask).
func (d *Dispatcher) Tokenize(ctx context.Context, model string, req prompt.Request) (prompt.Result, error) {
	return onModelNode(ctx, d, model,
		func() (prompt.Result, error) { return d.cfg.Local.Tokenize(ctx, model, req) },
		func(g engine.Generator) (prompt.Result, error) { return g.Tokenize(ctx, model, req) })
}

// Detokenize runs where Tokenize would.
func (d *Dispatcher) Detokenize(ctx context.Context, model string, ids []int) (string, error) {
	return onModelNode(ctx, d, model,
		func() (string, error) { return d.cfg.Local.Detokenize(ctx, model, ids) },
		func(g engine.Generator) (string, error) { return g.Detokenize(ctx, model, ids) })
}

// Embed runs where Tokenize would: embedding models have no KV state or
// sessions to be near.
func (d *Dispatcher) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	// An engine that cannot embed has no embedding model: not found there.
	embed := func(g any) (*engine.EmbedResult, error) {
		if e, ok := g.(engine.Embedder); ok {
			return e.Embed(ctx, req)
		}
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.EmbedResult, error) { return embed(d.cfg.Local) },
		func(g engine.Generator) (*engine.EmbedResult, error) { return embed(g) })
}

// Rerank runs where Embed would.
func (d *Dispatcher) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	rerank := func(g any) (*engine.RerankResult, error) {
		if r, ok := g.(engine.Reranker); ok {
			return r.Rerank(ctx, req)
		}
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.RerankResult, error) { return rerank(d.cfg.Local) },
		func(g engine.Generator) (*engine.RerankResult, error) { return rerank(g) })
}

// Transcribe runs where Embed would, or, for a batched transcription of
// several pieces where several nodes hold the model, split across them
// (splitTranscription). Once a node has handed segments to req.OnSegment
// its failure is final: another node would hand them again.
func (d *Dispatcher) Transcribe(ctx context.Context, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	if req.Batched && req.VADFilter && req.Pieces == [2]int{} {
		if pieces := engine.TranscribePieces(req.Speech); len(pieces) > 1 {
			if nodes := d.splitNodes(req.Model); len(nodes) > 1 {
				return d.splitTranscription(ctx, req, pieces, nodes)
			}
		}
	}
	return d.transcribe(ctx, req)
}

// transcribe runs req on one node: where Embed would.
func (d *Dispatcher) transcribe(ctx context.Context, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	transcribe := func(g any) (*engine.TranscribeResult, error) {
		t, ok := g.(engine.Transcriber)
		if !ok {
			return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
		}
		if req.OnSegment == nil {
			return t.Transcribe(ctx, req)
		}
		sent := false
		r := *req
		r.OnSegment = func(s engine.TranscribeSegment) { sent = true; req.OnSegment(s) }
		res, err := t.Transcribe(ctx, &r)
		if err != nil && sent {
			return nil, fmt.Errorf("transcription failed after its first segments: %v", err)
		}
		return res, err
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.TranscribeResult, error) { return transcribe(d.cfg.Local) },
		func(g engine.Generator) (*engine.TranscribeResult, error) { return transcribe(g) })
}

// Speak runs where Embed would. Once a node has handed audio to
// req.OnAudio its failure is final: another node would hand it again.
func (d *Dispatcher) Speak(ctx context.Context, req *engine.SpeechRequest) (*engine.SpeechResult, error) {
	speak := func(g any) (*engine.SpeechResult, error) {
		s, ok := g.(engine.Speaker)
		if !ok {
			return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
		}
		if req.OnAudio == nil {
			return s.Speak(ctx, req)
		}
		sent := false
		r := *req
		r.OnAudio = func(a engine.SpeechAudio) error { sent = true; return req.OnAudio(a) }
		res, err := s.Speak(ctx, &r)
		if err != nil && sent {
			return nil, fmt.Errorf("speech failed after its first sentences: %v", err)
		}
		return res, err
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.SpeechResult, error) { return speak(d.cfg.Local) },
		func(g engine.Generator) (*engine.SpeechResult, error) { return speak(g) })
}

// GenerateImage runs where Embed would, or, for several images where
// several nodes hold the model, split across them (splitImages). Once a
// node has reported a step to req.OnStep its failure is final: another
// node would start again.
func (d *Dispatcher) GenerateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	if req.N > 1 {
		if nodes := d.splitNodes(req.Model); len(nodes) > 1 {
			return d.splitImages(ctx, req, nodes)
		}
	}
	return d.generateImage(ctx, req)
}

// generateImage runs req on one node: where Embed would.
func (d *Dispatcher) generateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	generate := func(g any) (*engine.ImageResult, error) {
		ig, ok := g.(engine.ImageGenerator)
		if !ok {
			return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
		}
		if req.OnStep == nil {
			return ig.GenerateImage(ctx, req)
		}
		sent := false
		r := *req
		r.OnStep = func(s engine.ImageStep) { sent = true; req.OnStep(s) }
		res, err := ig.GenerateImage(ctx, &r)
		if err != nil && sent {
			return nil, fmt.Errorf("image generation failed after its first steps: %v", err)
		}
		return res, err
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.ImageResult, error) { return generate(d.cfg.Local) },
		func(g engine.Generator) (*engine.ImageResult, error) { return generate(g) })
}

// onModelNode runs local on this node unless it does not have the model,
// then remote on each peer that has it, until one answers or fails for
// good; with none, the model's not-found error (503 while peers are
// unheard, see notFound).
func onModelNode[T any](ctx context.Context, d *Dispatcher, model string, local func() (T, error), remote func(engine.Generator) (T, error)) (T, error) {
	res, err := local()
	if !errors.Is(err, engine.ErrModelNotFound) {
		return res, err
	}
	peers, aerr := d.peersWith(ctx, model)
	if aerr != nil {
		return res, aerr
	}
	for _, p := range peers {
		gen, cerr := d.cfg.Connect.Engine(p.Addr)
		if cerr != nil {
			continue
		}
		out, perr := remote(gen)
		if perr == nil || !retryable(perr) {
			return out, perr
		}
	}
	return res, d.notFound(model, err)
}

// peersWith lists the peers that have model ready, or on disk; for a
// model the table does not know, the unheard peers that have it (ask).
func (d *Dispatcher) peersWith(ctx context.Context, model string) ([]Peer, error) {
	self := d.cfg.Table.Self()
	ps := slices.DeleteFunc(usable(d.cfg.Table.Candidates(model)), func(p Peer) bool { return p.ID == self })
	if len(ps) > 0 || d.cfg.Table.Known(model) {
		return ps, nil
	}
	return d.ask(ctx, model)
}

func (d *Dispatcher) notFound(model string, err error) error {
	if d.cfg.Table.Known(model) {
		return fmt.Errorf("%w: %q is not ready on any node yet", engine.ErrUnavailable, model)
	}
	return err
}

var _ engine.Generator = (*Dispatcher)(nil)

// SessionHeader is the request header that names a session for affinity.
const SessionHeader = "X-Session-Id"

// MaxSessionIDLen bounds the session ids taken from SessionHeader; longer
// ones are ignored.
const MaxSessionIDLen = 256

// SessionMiddleware puts the SessionHeader of a request, when present and
// at most MaxSessionIDLen bytes, into its context (see WithSession).
func SessionMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.Header.Get(SessionHeader); s != "" && len(s) <= MaxSessionIDLen {
			r = r.WithContext(WithSession(r.Context(), s))
		}
		next.ServeHTTP(w, r)
	})
}

// Solo is the routing table of a node alone: no peers, so every request
// runs on the local engine (and answers carry its id).
type Solo string

// Self is the node's id.
func (s Solo) Self() string { return string(s) }

// Candidates is empty: the local engine is tried as for a model no node
// has ready.
func (Solo) Candidates(string) []Peer { return nil }

// Known is false: an unknown local model is a 404.
func (Solo) Known(string) bool { return false }

// Peers is empty.
func (Solo) Peers() []Peer { return nil }

// Unheard is empty: a lone node knows every model there is.
func (Solo) Unheard() []Peer { return nil }

// DetectSpeech runs where Embed would.
func (d *Dispatcher) DetectSpeech(ctx context.Context, req *engine.VADRequest) (*engine.VADResult, error) {
	detect := func(g any) (*engine.VADResult, error) {
		if s, ok := g.(engine.SpeechDetector); ok {
			return s.DetectSpeech(ctx, req)
		}
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.VADResult, error) { return detect(d.cfg.Local) },
		func(g engine.Generator) (*engine.VADResult, error) { return detect(g) })
}

// Denoise runs where Embed would.
func (d *Dispatcher) Denoise(ctx context.Context, req *engine.DenoiseRequest) (*engine.DenoiseResult, error) {
	denoise := func(g any) (*engine.DenoiseResult, error) {
		if s, ok := g.(engine.SpeechDenoiser); ok {
			return s.Denoise(ctx, req)
		}
		return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, req.Model)
	}
	return onModelNode(ctx, d, req.Model,
		func() (*engine.DenoiseResult, error) { return denoise(d.cfg.Local) },
		func(g engine.Generator) (*engine.DenoiseResult, error) { return denoise(g) })
}
