package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"fusion/engine"
	"fusion/engine/flux2"
	"fusion/engine/parser"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// ModelSettings are per-model settings of the pool.
type ModelSettings struct {
	// ContextLength caps the model's context (0: the model's own).
	ContextLength int
	// Sampling holds default sampling parameters: each one set here
	// replaces a request's value that is still sample.DefaultParams()'s
	// (so a request that asks for exactly the default gets the model's).
	Sampling SamplingDefaults
	// Parser overrides the output parser family detected from the chat
	// template (see engine/parser).
	Parser string
	// Pinned models are never evicted nor unloaded idle.
	Pinned bool
	// IdleTTL unloads the model after that long unused, instead of the
	// runner's IdleTTL (0: the runner's).
	IdleTTL time.Duration
	// ChatTemplate replaces the model's chat template (Jinja source; ""
	// keeps the model's).
	ChatTemplate string
	// Backend overrides Config.Backend for this model: auto, mlx or cpu
	// ("": the runner's).
	Backend string
	// DraftModel names the model (of this node's models dir) that drafts
	// tokens for this one in speculative decoding; it must have the same
	// tokenizer and vocabulary (CheckDraft). "": prompt lookup.
	DraftModel string
	// NumDraftTokens is how many tokens a draft proposes per step
	// (1..MaxDraftTokens; 0: Config.DraftTokens).
	NumDraftTokens int
	// Speculative makes speculative decoding the default for the model's
	// requests (as if each asked for backend_override "rapid").
	Speculative bool
}

// SamplingDefaults are optional per-model sampling defaults.
type SamplingDefaults struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
}

// Apply fills p's fields left at their defaults.
func (d SamplingDefaults) Apply(p *sample.Params) {
	def := sample.DefaultParams()
	if d.Temperature != nil && p.Temperature == def.Temperature {
		p.Temperature = *d.Temperature
	}
	if d.TopP != nil && p.TopP == def.TopP {
		p.TopP = *d.TopP
	}
	if d.TopK != nil && p.TopK == def.TopK {
		p.TopK = *d.TopK
	}
	if d.MinP != nil && p.MinP == def.MinP {
		p.MinP = *d.MinP
	}
	if d.RepetitionPenalty != nil && p.RepetitionPenalty == def.RepetitionPenalty {
		p.RepetitionPenalty = *d.RepetitionPenalty
	}
}

// ModelState is where a model is in the pool.
type ModelState string

// Model states.
const (
	StateUnloaded ModelState = "unloaded"
	StateLoading  ModelState = "loading"
	StateReady    ModelState = "ready" // loaded, requests in flight
	StateIdle     ModelState = "idle"  // loaded, nothing in flight
)

// ModelStatus is one model of the pool, as List reports it.
type ModelStatus struct {
	ID       string
	State    ModelState
	Bytes    int64 // weights held (an estimate from the files while loading)
	KVBytes  int64
	Pinned   bool
	Active   int       // requests in flight (waiting or running)
	LastUsed time.Time // zero if never used
	// Backend is the compute backend the model runs on when loaded, or
	// will load on (mlx or cpu).
	Backend string
}

// Errors of the pool API.
var (
	// ErrBusy: the model has requests in flight (or is loading).
	ErrBusy = errors.New("model busy")
	// ErrOverBudget: the model does not fit the memory budget even after
	// evicting every idle unpinned model. It wraps engine.ErrUnavailable.
	ErrOverBudget = fmt.Errorf("%w: over the memory budget", engine.ErrUnavailable)
)

// entry is one model of the models dir, loaded or not. Its fields but
// info are guarded by Runner.mu.
type entry struct {
	info engine.ModelInfo

	loaded   *loadedModel
	loading  *loadCall // non-nil while a load runs
	reserved int64     // bytes counted against the budget while loading
	pinned   bool
	active   int // requests in flight on the model
	lastUsed time.Time
}

// loadCall is one load in progress; waiters wait for done.
type loadCall struct {
	done chan struct{}
	err  error
}

func (e *entry) state() ModelState {
	switch {
	case e.loading != nil:
		return StateLoading
	case e.loaded == nil:
		return StateUnloaded
	case e.active > 0:
		return StateReady
	}
	return StateIdle
}

// bytes the entry counts against the memory budget.
func (e *entry) bytes() int64 {
	if e.loaded != nil {
		return e.loaded.weightBytes()
	}
	return e.reserved
}

// Load loads a model if it is not loaded, evicting idle unpinned models
// (least recently used first) when it would not fit the memory budget.
func (r *Runner) Load(ctx context.Context, name string) error {
	_, release, err := r.acquire(ctx, name)
	if err != nil {
		return err
	}
	release()
	return nil
}

// Unload frees a loaded model (and unpins it). It refuses with ErrBusy
// while the model has requests in flight or is loading.
func (r *Runner) Unload(ctx context.Context, name string) error {
	e, err := r.entry(name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if active := e.active; e.loading != nil || active > 0 {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s has %d requests in flight", ErrBusy, name, active)
	}
	e.pinned = false
	lm := e.loaded
	e.loaded = nil
	r.mu.Unlock()
	if lm == nil {
		return nil
	}
	r.cfg.Logger.Info("model unloaded", "model", name)
	return lm.close()
}

// Pin keeps a model from eviction and idle unload (it does not load it).
func (r *Runner) Pin(name string) error { return r.setPinned(name, true) }

// Unpin lets a model be evicted and unloaded idle again.
func (r *Runner) Unpin(name string) error { return r.setPinned(name, false) }

func (r *Runner) setPinned(name string, pinned bool) error {
	e, err := r.entry(name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	e.pinned = pinned
	r.mu.Unlock()
	return nil
}

// List reports every model of the models dir with its pool state, by name.
func (r *Runner) List() []ModelStatus {
	_ = r.rescan()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ModelStatus, 0, len(r.models))
	for _, e := range r.models {
		st := ModelStatus{ID: e.info.ID, State: e.state(), Bytes: e.bytes(), Pinned: e.pinned, Active: e.active, LastUsed: e.lastUsed,
			Backend: r.backends.forModel(e.info.ID)}
		if e.loaded != nil {
			st.KVBytes = e.loaded.kvBytes()
			st.Backend = e.loaded.backend()
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// acquire returns the loaded model, loading it first if needed, and counts
// one request in flight on it until release is called (a model with
// requests in flight is never evicted).
func (r *Runner) acquire(ctx context.Context, name string) (*loadedModel, func(), error) {
	e, err := r.entry(name)
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		r.mu.Lock()
		e.active--
		e.lastUsed = time.Now()
		r.mu.Unlock()
	}
	r.mu.Lock()
	for {
		select {
		case <-r.closed:
			r.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: shutting down", engine.ErrUnavailable)
		default:
		}
		if e.loaded != nil {
			e.active++
			e.lastUsed = time.Now()
			lm := e.loaded
			r.mu.Unlock()
			return lm, release, nil
		}
		if c := e.loading; c != nil {
			r.mu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			if c.err != nil {
				return nil, nil, c.err
			}
			r.mu.Lock()
			continue
		}
		break
	}
	// Load it: reserve its estimated size, evicting what must go.
	need := estimateBytes(e.info.Path)
	if p := r.pipelines[e.info.ID]; p != nil && p.weights > 0 {
		need = p.weights // its layers' share
	} else {
		need += r.draftBytes(e.info.ID) // a draft model loads with it
	}
	victims, err := r.makeRoom(e, need)
	if err != nil {
		r.mu.Unlock()
		return nil, nil, err
	}
	c := &loadCall{done: make(chan struct{})}
	e.loading, e.reserved = c, need
	r.mu.Unlock()

	var errs []error
	for _, v := range victims {
		errs = append(errs, v.close())
	}
	if err := errors.Join(errs...); err != nil {
		r.cfg.Logger.Warn("closing an evicted model", "err", err)
	}
	lm, err := r.loadModel(ctx, e)

	r.mu.Lock()
	e.loading, e.reserved = nil, 0
	c.err = err
	close(c.done)
	if err != nil {
		r.mu.Unlock()
		return nil, nil, err
	}
	e.loaded = lm
	e.active++
	e.lastUsed = time.Now()
	r.mu.Unlock()
	return lm, release, nil
}

// makeRoom evicts idle unpinned models, least recently used first, until
// need more bytes fit the budget (target: the model they are for, nil for
// a pipeline stage); it detaches them (the caller closes them outside the
// lock). Called with r.mu held.
func (r *Runner) makeRoom(target *entry, need int64) ([]*loadedModel, error) {
	used := r.stageBytes // later pipeline stages held here
	var idle []*entry
	for _, e := range r.models {
		used += e.bytes()
		if e != target && e.loaded != nil && e.active == 0 && !e.pinned {
			idle = append(idle, e)
		}
	}
	if used+need <= r.cfg.MemoryBudget {
		return nil, nil
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUsed.Before(idle[j].lastUsed) })
	freeable := int64(0)
	n := 0
	for n < len(idle) && used-freeable+need > r.cfg.MemoryBudget {
		freeable += idle[n].bytes()
		n++
	}
	what := "a pipeline stage"
	if target != nil {
		what = target.info.ID
	}
	if used-freeable+need > r.cfg.MemoryBudget {
		return nil, fmt.Errorf("%w: %s needs %d bytes; %d of the budget of %d bytes are held by models that are pinned or in use (or pipeline stages)",
			ErrOverBudget, what, need, used-freeable, r.cfg.MemoryBudget)
	}
	var out []*loadedModel
	for _, v := range idle[:n] {
		r.cfg.Logger.Info("model evicted", "model", v.info.ID, "bytes", v.bytes(), "for", what)
		out = append(out, v.loaded)
		v.loaded = nil
		r.evictions++
	}
	return out, nil
}

// loadModel loads e's weights, takes its template and tokenizer from the
// text cache (parsed already when its tokens were counted before), and
// starts its scheduler. The load runs to its end for every waiter, so a
// cancelled ctx does not stop it. An embedding model has no template and
// no scheduler.
func (r *Runner) loadModel(ctx context.Context, e *entry) (*loadedModel, error) {
	if e.info.Kind == engine.KindEmbedding || e.info.Kind == engine.KindRerank || e.info.Kind == engine.KindTranscription || e.info.Kind == engine.KindSpeech || e.info.Kind == engine.KindImage || e.info.Kind == engine.KindVAD || e.info.Kind == engine.KindDenoise {
		em, err := r.loader.loadEmbedding(e.info)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.info.ID, err)
		}
		em.start(r.cfg.EmbedBatchTokens, &r.embedStats)
		r.cfg.Logger.Info("model loaded", "model", e.info.ID, "kind", e.info.Kind, "weight_bytes", em.weightBytes())
		lm := &loadedModel{name: e.info.ID, emb: em}
		lm.setSettings(r.modelSettings(e.info.ID))
		return lm, nil
	}
	text, err := r.text(context.WithoutCancel(ctx), e)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	pipe := r.pipelines[e.info.ID]
	r.mu.Unlock()
	var m languageModel
	if pipe != nil {
		m, err = r.loadPipeline(e.info, pipe)
	} else {
		m, err = r.loader.load(e.info)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.info.ID, err)
	}
	r.cfg.Logger.Info("model loaded", "model", e.info.ID, "weight_bytes", m.WeightBytes())
	set := r.modelSettings(e.info.ID)
	var draft *draftModel
	rec, _ := m.(interface{ Recurrent() bool })
	recurrent := rec != nil && rec.Recurrent()
	if set.DraftModel != "" && pipe == nil && recurrent {
		return nil, errors.Join(fmt.Errorf("%w: %s: speculative decoding rewinds the target, which a model with recurrent layers cannot", engine.ErrUnavailable, e.info.ID), m.Close())
	}
	if set.DraftModel != "" && pipe == nil {
		if draft, err = r.loadDraft(context.WithoutCancel(ctx), e.info.ID, set.DraftModel, m); err != nil {
			return nil, errors.Join(fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.info.ID, err), m.Close())
		}
	}
	if set.ChatTemplate != "" {
		if text, err = prompt.New(text.Tokenizer(), set.ChatTemplate); err != nil {
			return nil, fmt.Errorf("%w: %s: the chat template of its settings: %v", engine.ErrUnavailable, e.info.ID, err)
		}
	}
	lm := &loadedModel{name: e.info.ID, text: text, model: m, draft: draft, parser: parser.Detect(text.TemplateSource(), set.Parser)}
	lm.setSettings(set)
	lm.cacheKey, lm.cacheKeyErr = modelCacheKey(e.info.Path, m.Backend(), r.backends.kvLayout(e.info.ID))
	lm.recurrent = recurrent
	if pm, ok := m.(*pipelineModel); ok {
		// A pipeline of a model with DeltaNet layers on any stage keeps
		// state snapshots as one node does (its prefill cut at snapshot
		// boundaries, its restores ending on one: stageprefix.go).
		lm.recurrent = pm.wholeRecurrent()
	}
	lm.sched = newScheduler(r, e.info.ID, m)
	return lm, nil
}

// estimateBytes is the size of a model's weight files, what loading it
// will hold (the CPU backend uses weights as the file stores them).
func estimateBytes(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if !st.IsDir() {
		return st.Size()
	}
	var n int64
	if flux2.IsCheckpoint(path) {
		// A diffusers checkpoint: the weights of its component folders.
		for _, c := range []string{flux2.TextEncoderDir, flux2.TransformerDir, flux2.VAEDir} {
			n += estimateBytes(filepath.Join(path, c))
		}
		return n
	}
	entries, _ := os.ReadDir(path)
	for _, de := range entries {
		name := de.Name()
		if strings.HasSuffix(name, ".safetensors") || strings.HasSuffix(name, ".gguf") || name == "model.bin" {
			if fi, err := os.Stat(filepath.Join(path, name)); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// reapIdle unloads unpinned models idle for IdleTTL, until Close.
func (r *Runner) reapIdle() {
	defer r.bg.Done()
	every := time.Second // per-model TTLs only
	if r.cfg.IdleTTL > 0 {
		every = min(max(r.cfg.IdleTTL/4, 10*time.Millisecond), time.Minute)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.closed:
			return
		case now := <-t.C:
			var idle []*loadedModel
			r.mu.Lock()
			for _, e := range r.models {
				ttl := r.cfg.IdleTTL
				if e.loaded != nil {
					if t := e.loaded.settings().IdleTTL; t > 0 {
						ttl = t
					}
				}
				if ttl > 0 && e.loaded != nil && e.active == 0 && !e.pinned && now.Sub(e.lastUsed) >= ttl {
					r.cfg.Logger.Info("model unloaded idle", "model", e.info.ID, "idle", now.Sub(e.lastUsed).Round(time.Second))
					idle = append(idle, e.loaded)
					e.loaded = nil
					r.evictions++
				}
			}
			r.mu.Unlock()
			for _, lm := range idle {
				if err := lm.close(); err != nil {
					r.cfg.Logger.Warn("closing an idle model", "err", err)
				}
			}
		}
	}
}

// MemoryTotal is the machine's physical memory in bytes (0 if unknown),
// for the node's inventory.
func (r *Runner) MemoryTotal() int64 { return totalRAM() }

// MemoryFree is the machine's free memory in bytes (0 if unknown), for the
// node's inventory and its peers' stats.
func (r *Runner) MemoryFree() int64 { return freeRAM() }
