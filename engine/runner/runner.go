// Package runner is the engine's Generator for one node: it finds the
// models in a models directory, keeps several of them loaded under a
// memory budget (the pool: load on demand, LRU eviction, pinning, idle
// unload), renders and tokenizes prompts, and runs every loaded model with
// a continuous-batching scheduler: one step loop per model batches the
// decode tokens of all running sequences and chunks of prompts into one
// forward pass, admitting requests by priority class, while sampling, stop
// matching and output parsing stay per request.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"fusion/engine"
	"fusion/engine/embed"
	"fusion/engine/flux2"
	"fusion/engine/grammar"
	"fusion/engine/modelfile"
	"fusion/engine/piper"
	"fusion/engine/prefixcache"
	"fusion/engine/prompt"
	"fusion/engine/sample"
	"fusion/engine/silero"
	"fusion/engine/whisper"
)

// Config configures a Runner. Zero values take the defaults noted; every
// limit is per node.
type Config struct {
	ModelsDir string
	// HFCache is a Hugging Face cache directory (huggingface_hub's
	// layout) whose complete snapshots are listed beside the models
	// dir's own, named ORG/NAME; the models dir wins on a name clash.
	// "" = none. It is only read.
	HFCache string
	// MaxQueuedImages is how many image generations may be in flight at
	// once (one runs, the rest wait) before GenerateImage answers
	// engine.ErrOverloaded (default DefaultMaxQueuedImages). MaxImageBytes
	// caps the working memory one generation may need (default: half of
	// the free RAM when it starts).
	MaxQueuedImages int
	MaxImageBytes   int64
	// Preload names models to load at start.
	Preload []string
	// MaxQueued is how many requests may be in flight (waiting or running)
	// at once on this node before Generate answers engine.ErrOverloaded
	// (default 64).
	MaxQueued int
	// MaxRunning is how many sequences may be in the running batches of
	// this node's models at once; admitted requests beyond it wait
	// (default 16).
	MaxRunning int
	// MaxKVBytes caps the KV cache memory of running sequences on this
	// node (default: a quarter of RAM, 4 GiB when RAM is unknown).
	MaxKVBytes int64
	// MaxTokens caps max_tokens of any request, and is the default when a
	// request gives none. 0 (the default): no cap of the node's own; a
	// generation may take what the model's context window leaves after
	// its prompt.
	MaxTokens int
	// StepTokens is the token budget of one scheduler step: the decode
	// tokens of the running sequences plus prompt chunks up to it
	// (default 512; prompts always get at least 16 tokens a step).
	StepTokens int
	// MaxWait and MaxWaitSteps bound starvation: a waiting request that
	// waited this long, or this many steps of its model, goes ahead of
	// every class at the next free slot and is no longer preempted
	// (defaults 30s and 4096 steps; negative turns one off).
	MaxWait      time.Duration
	MaxWaitSteps int
	// MemoryBudget caps the weights of the loaded models; loading past it
	// evicts idle unpinned models, least recently used first (default:
	// half of RAM, 8 GiB when RAM is unknown).
	MemoryBudget int64
	// IdleTTL unloads an unpinned model nothing used for that long
	// (0: never).
	IdleTTL time.Duration
	// Models holds per-model settings by model name.
	Models map[string]ModelSettings
	// Threads for the CPU backend (default: all cores).
	Threads int
	// Backend is the compute backend models load on: BackendAuto (""),
	// BackendMLX or BackendCPU; ModelSettings.Backend overrides it per
	// model. MLX that does not load falls back to the CPU backend, with
	// the reason in BackendStatus.
	Backend string
	// MLXMemoryLimit and MLXCacheLimit are MLX's memory limit and buffer
	// cache limit in bytes, applied when MLX is loaded (0: MLX's own;
	// the cache limit may not exceed the memory limit).
	MLXMemoryLimit, MLXCacheLimit int64
	// WrapBackend, when set, wraps every backend made for a model (tests
	// inject faults with it).
	WrapBackend WrapBackend
	// LoadMode for weights: "read" or "mmap" ("" = the loader's default).
	LoadMode string
	// CacheDir is the prefix cache's SSD tier directory ("" = no SSD tier).
	CacheDir string
	// CacheHotBytes caps the prefix cache's RAM tier (0: 10% of the
	// machine's RAM; negative: off).
	CacheHotBytes int64
	// CacheSSDBytes caps the SSD tier (0: 10 GiB; negative: off).
	CacheSSDBytes int64
	// CacheWriteQueue is how many blocks may wait to be written to the SSD
	// before new ones are dropped (default 64).
	CacheWriteQueue int
	// CacheStateEvery is, for models with recurrent layers (Gated
	// DeltaNet), how many prefix-cache blocks apart the prefill keeps a
	// snapshot of their state. A restore ends at
	// a block with a snapshot; prefill chunks end at them. Default
	// DefaultCacheStateEvery.
	CacheStateEvery int
	// MaxEmbedInputs caps the inputs of one embeddings request (default
	// 2048).
	MaxEmbedInputs int
	// Espeak is the phonemizer of the text-to-speech voices (zero:
	// espeak-ng on PATH with its own data).
	Espeak piper.Espeak
	// MaxRerankDocuments caps the documents of one rerank request
	// (default DefaultMaxRerankDocuments).
	MaxRerankDocuments int
	// EmbedBatchTokens bounds one encoder pass of an embedding model, in
	// padded tokens (inputs × the longest of them): the waiting inputs of
	// all requests are sorted by length and run in passes up to this
	// bound (default DefaultEmbedBatchTokens; an input longer than it
	// runs alone).
	EmbedBatchTokens int
	// MaxToolCalls bounds the calls of one answer under a forced tool
	// choice with parallel calls allowed (default 8).
	MaxToolCalls int
	// TextCacheModels is how many models' text sides (tokenizer, chat
	// template) the runner keeps parsed, loaded or not, least recently
	// used out first (default DefaultTextCacheModels).
	TextCacheModels int
	// DraftTokens is how many tokens speculative decoding proposes per
	// step (1..MaxDraftTokens; default DefaultDraftTokens); a model's
	// num_draft_tokens setting replaces it.
	DraftTokens int
	// LookupMin and LookupMax are the n-gram sizes prompt-lookup drafting
	// matches, longest first (1 ≤ min ≤ max ≤ MaxLookupNgram; defaults
	// DefaultLookupMin and DefaultLookupMax).
	LookupMin, LookupMax int
	Logger               *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxQueued  = 64
	DefaultMaxRunning = 16
	DefaultStepTokens = 512
	// DefaultCacheStateEvery: a recurrent-state snapshot every 4 blocks
	// (256 tokens). A snapshot of a Qwen3.5/3.6-27B-shaped model is 150
	// MiB, 19 times a block's KV (engine/runner/DESIGN.md).
	DefaultCacheStateEvery = 4
	DefaultMaxWait         = 30 * time.Second
	DefaultMaxWaitSteps    = 4096
	minPrefillTokens       = 16
	// DefaultTextCacheModels is TextCacheModels' default.
	DefaultTextCacheModels = prompt.DefaultCacheModels
)

func (c *Config) defaults() {
	ram := totalRAM()
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = DefaultMaxRunning
	}
	if c.MaxKVBytes == 0 {
		c.MaxKVBytes = 4 << 30
		if ram > 0 {
			c.MaxKVBytes = ram / 4
		}
	}
	if c.StepTokens == 0 {
		c.StepTokens = DefaultStepTokens
	}
	if c.CacheStateEvery <= 0 {
		c.CacheStateEvery = DefaultCacheStateEvery
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MaxWaitSteps == 0 {
		c.MaxWaitSteps = DefaultMaxWaitSteps
	}
	if c.MemoryBudget == 0 {
		c.MemoryBudget = 8 << 30
		if ram > 0 {
			c.MemoryBudget = ram / 2
		}
	}
	if c.MaxEmbedInputs == 0 {
		c.MaxEmbedInputs = DefaultMaxEmbedInputs
	}
	if c.MaxRerankDocuments == 0 {
		c.MaxRerankDocuments = DefaultMaxRerankDocuments
	}
	if c.EmbedBatchTokens == 0 {
		c.EmbedBatchTokens = DefaultEmbedBatchTokens
	}
	if c.MaxToolCalls == 0 {
		c.MaxToolCalls = 8
	}
	if c.DraftTokens == 0 {
		c.DraftTokens = DefaultDraftTokens
	}
	if c.LookupMin == 0 {
		c.LookupMin = DefaultLookupMin
	}
	if c.LookupMax == 0 {
		c.LookupMax = max(DefaultLookupMax, c.LookupMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Runner implements engine.Generator over a models directory.
type Runner struct {
	cfg      Config
	images   *imageQueue // image generations, outside the chat scheduler (image.go)
	loader   loader
	backends *backends

	mu     sync.Mutex // guards models and the pool state of every entry
	models map[string]*entry
	// pipelines: the models this node runs as a pipeline's first stage
	// (SetPipeline), loaded with their layers only.
	pipelines map[string]*Pipeline
	// stageBytes: the budget later pipeline stages hold (LoadStage).
	stageBytes int64

	settingsMu sync.Mutex // guards cfg.Models (SetModelSettings writes it)

	pcache *prefixcache.Cache // nil when off

	grammars *grammarCache // compiled response formats and forced tool calls
	texts    *prompt.Cache // the models' text sides, shared by loaded models and token counting

	ggufInfo *ggufInfoCache // GGUF headers as the models list judged them (Details)

	inFlight  atomic.Int64 // admitted requests not yet finished
	running   atomic.Int64 // sequences in running batches (≤ MaxRunning)
	kvBytes   atomic.Int64 // KV allocated by running sequences, all models
	cancelled atomic.Int64 // generations stopped by their context
	generated atomic.Int64 // tokens sampled for clients
	drafted   atomic.Int64 // tokens speculative decoding proposed
	accepted  atomic.Int64 // drafted tokens the models kept
	peak      atomic.Int64 // highest weight+KV bytes seen
	kvWatch   kvWatches    // KV high-water marks of WatchKV callers
	evictions int64        // models evicted or unloaded idle (under mu)
	avgMillis atomic.Int64 // moving average of a generation's duration

	embedStats embedStats // passes and inputs of the embeddings batchers

	wg      sync.WaitGroup // delivery goroutines of generations
	bg      sync.WaitGroup // the idle reaper
	closed  chan struct{}
	closing sync.Once
}

type loadedModel struct {
	name  string // the model's id
	text  *prompt.Builder
	model languageModel   // nil for an embedding model
	draft *draftModel     // the draft model of its settings, if any
	emb   *embeddingModel // nil for a language model
	// parser names the output parser family, detected from the template
	// or set by the model's settings.
	parser string
	live   atomic.Pointer[ModelSettings] // the settings in force (SetModelSettings swaps them)
	sched  *scheduler

	// cacheKey is the model's prefix-cache identity (see modelCacheKey).
	cacheKey    prefixcache.Key
	cacheKeyErr error
	// recurrent: the model has layers whose state is not a KV cache; its
	// prefix-cache blocks carry snapshots of that state (prefix.go).
	recurrent bool

	vocabOnce sync.Once
	vocab     *grammar.Vocab // for constrained decoding, built on first use
	spaces    sample.Bitset  // whitespace-only tokens (with vocab)
	reasoning sample.Bitset  // tokens reasoning may use (with vocab)
}

// contextLength is the model's context, capped by its settings.
func (lm *loadedModel) contextLength() int {
	n := lm.model.ContextLength()
	if c := lm.settings().ContextLength; c > 0 && c < n {
		return c
	}
	return n
}

// New scans cfg.ModelsDir and loads cfg.Preload.
func New(cfg Config) (*Runner, error) {
	cfg.defaults()
	if err := cfg.checkDrafting(); err != nil {
		return nil, err
	}
	bes, err := resolveBackends(cfg)
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, models: map[string]*entry{}, closed: make(chan struct{}), backends: bes, images: newImageQueue(cfg.MaxQueuedImages),
		loader:   backendLoader{threads: cfg.Threads, loadMode: cfg.LoadMode, backends: bes},
		grammars: newGrammarCache(grammarCacheSize), texts: prompt.NewCache(cfg.TextCacheModels),
		ggufInfo: newGGUFInfoCache()}
	return r.start()
}

func (r *Runner) start() (*Runner, error) {
	if err := r.rescan(); err != nil {
		return nil, errors.Join(err, r.backends.close())
	}
	var err error
	if r.pcache, err = openPrefixCache(r.cfg); err != nil {
		return nil, errors.Join(err, r.backends.close())
	}
	for name, s := range r.cfg.Models {
		if s.Pinned {
			if e, err := r.entry(name); err == nil {
				r.mu.Lock()
				e.pinned = true
				r.mu.Unlock()
			}
		}
	}
	for _, name := range r.cfg.Preload {
		if err := r.Load(context.Background(), name); err != nil {
			return nil, errors.Join(fmt.Errorf("preload %s: %w", name, err), r.Close())
		}
	}
	// The reaper always runs: a model's own TTL may be set at any time.
	r.bg.Add(1)
	go r.reapIdle()
	return r, nil
}

// rescan adds models that appeared in the models dir since the last scan.
func (r *Runner) rescan() error {
	var found []modelfile.Entry
	if r.cfg.ModelsDir != "" {
		var err error
		found, err = modelfile.Discover(r.cfg.ModelsDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// After the models dir's own: on a name clash those win (a name
	// already registered is kept below).
	found = append(found, modelfile.DiscoverHFCache(r.cfg.HFCache)...)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range found {
		if _, ok := r.models[f.Name]; ok {
			continue
		}
		info := engine.ModelInfo{ID: f.Name, Path: f.Path, Format: string(f.Kind), Kind: engine.KindChat}
		switch {
		case f.Kind == modelfile.KindONNX && piper.IsVoiceDir(f.Path):
			info.Kind = engine.KindSpeech
		case f.Kind == modelfile.KindONNX && silero.IsModelDir(f.Path):
			info.Kind = engine.KindVAD
		case f.Kind == modelfile.KindRNNoise:
			info.Kind = engine.KindDenoise
		case f.Kind != modelfile.KindSafetensors:
		case flux2.IsCheckpoint(f.Path):
			info.Kind, info.Format = engine.KindImage, "diffusers"
		case whisper.IsModelDir(f.Path):
			info.Kind, info.Format = engine.KindTranscription, "ctranslate2"
		case embed.IsCrossEncoder(f.Path):
			info.Kind = engine.KindRerank
		case embed.IsEmbeddingModel(f.Path):
			info.Kind = engine.KindEmbedding
		}
		if st, err := os.Stat(f.Path); err == nil {
			info.Created = st.ModTime().Unix()
		}
		r.models[f.Name] = &entry{info: info}
	}
	return nil
}

func (r *Runner) entry(name string) (*entry, error) {
	r.mu.Lock()
	e, ok := r.models[name]
	r.mu.Unlock()
	if ok {
		return e, nil
	}
	if err := r.rescan(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.models[name]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("%w: %q", engine.ErrModelNotFound, name)
}

// Models lists the models of the models dir, loaded or not, by name.
func (r *Runner) Models(ctx context.Context) ([]engine.ModelInfo, error) {
	if err := r.rescan(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]engine.ModelInfo, 0, len(r.models))
	for _, e := range r.models {
		info := e.info
		info.Loaded = e.loaded != nil
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// textOf returns the prompt builder of a model: the loaded model's, or
// else the text cache's, which parses the tokenizer and template once and
// shares them until the files change or the cache drops them.
func (r *Runner) textOf(ctx context.Context, name string) (*prompt.Builder, error) {
	e, err := r.entry(name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	lm := e.loaded
	r.mu.Unlock()
	if lm != nil && lm.text != nil {
		return lm.text, nil
	}
	return r.text(ctx, e)
}

// text gets e's text side from the cache.
func (r *Runner) text(ctx context.Context, e *entry) (*prompt.Builder, error) {
	b, err := r.texts.Get(ctx, e.info.Path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.info.ID, err)
	}
	return b, nil
}

// TextCacheStats are the figures of the models' text cache.
func (r *Runner) TextCacheStats() prompt.CacheStats { return r.texts.Stats() }

// Tokenize renders and tokenizes as POST /tokenize does.
func (r *Runner) Tokenize(ctx context.Context, model string, req prompt.Request) (prompt.Result, error) {
	b, err := r.textOf(ctx, model)
	if err != nil {
		return prompt.Result{}, err
	}
	return b.Tokenize(req)
}

// Detokenize turns ids into text as POST /detokenize does.
func (r *Runner) Detokenize(ctx context.Context, model string, ids []int) (string, error) {
	b, err := r.textOf(ctx, model)
	if err != nil {
		return "", err
	}
	return b.Detokenize(ids)
}

// Stats are the runner's live figures.
type Stats struct {
	InFlight    int64 // admitted requests not yet finished
	Running     int64 // sequences in running batches
	Waiting     int64 // admitted requests waiting for a slot
	Cancelled   int64 // generations stopped because their client went away
	WeightBytes int64 // weights of loaded models
	KVBytes     int64 // KV cache allocated by running generations
	PeakBytes   int64 // highest WeightBytes+KVBytes seen

	// Scheduler figures, summed over the loaded models (since load).
	Steps       int64 // forward steps
	SharedSteps int64 // steps that ran two or more sequences
	StepRows    int64 // tokens that went through the steps
	MaxBatch    int64 // most sequences in one step
	Preemptions int64 // sequences preempted (their KV freed, re-queued)
	Evictions   int64 // models evicted or unloaded idle (whole runner)
	Generated   int64 // tokens sampled for clients (since start)
	// Speculative decoding (since start): tokens drafted, and those of
	// them the models accepted.
	Drafted, Accepted int64
}

// Stats returns the live figures.
func (r *Runner) Stats() Stats {
	s := Stats{InFlight: r.inFlight.Load(), Running: r.running.Load(), Cancelled: r.cancelled.Load(), Generated: r.generated.Load(),
		Drafted: r.drafted.Load(), Accepted: r.accepted.Load()}
	r.mu.Lock()
	s.Evictions = r.evictions
	for _, e := range r.models {
		if e.loaded == nil {
			continue
		}
		s.WeightBytes += e.loaded.weightBytes()
		s.KVBytes += e.loaded.kvBytes()
		if e.loaded.sched == nil {
			continue
		}
		st := e.loaded.sched.stats()
		s.Waiting += st.waiting
		s.Steps += st.steps
		s.SharedSteps += st.sharedSteps
		s.StepRows += st.rows
		s.MaxBatch = max(s.MaxBatch, st.maxBatch)
		s.Preemptions += st.preemptions
	}
	r.mu.Unlock()
	s.PeakBytes = r.notePeak(s.WeightBytes + s.KVBytes)
	return s
}

var _ engine.Generator = (*Runner)(nil)

// Close stops accepting work, waits for running generations (their
// contexts should be cancelled by then), stops the schedulers and frees
// the models.
func (r *Runner) Close() error {
	first := false
	r.closing.Do(func() { close(r.closed); first = true })
	if !first {
		return nil
	}
	r.wg.Wait()
	r.bg.Wait()
	r.mu.Lock()
	var loaded []*loadedModel
	for _, e := range r.models {
		if e.loaded != nil {
			loaded = append(loaded, e.loaded)
			e.loaded = nil
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, lm := range loaded {
		errs = append(errs, lm.close())
	}
	errs = append(errs, r.closePipelines())
	if r.pcache != nil {
		// After the schedulers stopped: writes the queued blocks.
		errs = append(errs, r.pcache.Close())
	}
	errs = append(errs, r.backends.close())
	return errors.Join(errs...)
}

// close stops the model's scheduler and frees the model.
func (lm *loadedModel) close() error {
	if lm.emb != nil {
		return lm.emb.close()
	}
	lm.sched.close()
	err := lm.model.Close()
	if lm.draft != nil {
		err = errors.Join(err, lm.draft.model.Close())
	}
	return err
}

// weightBytes is the memory the model's weights hold.
func (lm *loadedModel) weightBytes() int64 {
	if lm.emb != nil {
		return lm.emb.weightBytes()
	}
	n := lm.model.WeightBytes()
	if lm.draft != nil {
		n += lm.draft.model.WeightBytes()
	}
	return n
}

// backend names the compute backend the model runs on.
func (lm *loadedModel) backend() string {
	if lm.emb != nil {
		return lm.emb.be.Name()
	}
	return lm.model.Backend()
}

// kvBytes is the KV memory of the model's running sequences (none for an
// embedding model, which keeps no cache).
func (lm *loadedModel) kvBytes() int64 {
	if lm.emb != nil {
		return 0
	}
	n := lm.model.KVBytes()
	if lm.draft != nil {
		n += lm.draft.model.KVBytes()
	}
	return n
}

// wakeAll pokes every scheduler: a slot or KV memory was freed, which may
// let another model admit a waiting request.
func (r *Runner) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.models {
		if e.loaded != nil && e.loaded.sched != nil {
			e.loaded.sched.poke()
		}
	}
}

// takeSlot takes one of the node's MaxRunning slots if one is free.
func (r *Runner) takeSlot() bool {
	for {
		n := r.running.Load()
		if n >= int64(r.cfg.MaxRunning) {
			return false
		}
		if r.running.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// retryAfter is the hint given with ErrOverloaded: about how long the
// requests ahead take to drain through the running slots, from the moving
// average of a generation's duration, between 1 s and 60 s.
func (r *Runner) retryAfter() time.Duration {
	avg := time.Duration(r.avgMillis.Load()) * time.Millisecond
	waves := (r.inFlight.Load() + int64(r.cfg.MaxRunning) - 1) / int64(r.cfg.MaxRunning)
	return min(max(avg*time.Duration(max(waves, 1)), time.Second), time.Minute)
}

// noteDuration feeds a finished generation's duration into the average.
func (r *Runner) noteDuration(d time.Duration) {
	ms := d.Milliseconds()
	for {
		old := r.avgMillis.Load()
		v := ms
		if old > 0 {
			v = old + (ms-old)/8
		}
		if r.avgMillis.CompareAndSwap(old, v) {
			return
		}
	}
}
