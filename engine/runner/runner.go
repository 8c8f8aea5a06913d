// Package runner is the engine's Generator for one node: it finds the
// models in a models directory, loads them on first use (or at start),
// renders and tokenizes prompts, runs the model, samples, stops on stop
// tokens and stop sequences, and streams whole-UTF-8 text back. One
// generation runs at a time per model; waiting requests queue up to a
// limit (the continuous-batching scheduler replaces this loop later).
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

	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/modelfile"
	"fusion/engine/parser"
	"fusion/engine/prompt"
)

// Config configures a Runner. Zero values take the defaults noted.
type Config struct {
	ModelsDir string
	// Preload names models to load at start.
	Preload []string
	// MaxQueued is how many requests may wait or run at once on this node
	// before Generate answers engine.ErrOverloaded (default 64).
	MaxQueued int
	// MaxTokens caps max_tokens of any request, and is the default when a
	// request gives none (default 4096).
	MaxTokens int
	// Threads for the CPU backend (default: all cores).
	Threads int
	// LoadMode for weights: "read" or "mmap" ("" = the loader's default).
	LoadMode string
	// PrefillChunk is how many prompt tokens go through the model per step
	// (default 512); cancellation is checked between chunks.
	PrefillChunk int
	// MaxToolCalls bounds the calls of one answer under a forced tool
	// choice with parallel calls allowed (default 8).
	MaxToolCalls int
	Logger       *slog.Logger
}

func (c *Config) defaults() {
	if c.MaxQueued == 0 {
		c.MaxQueued = 64
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 4096
	}
	if c.PrefillChunk == 0 {
		c.PrefillChunk = 512
	}
	if c.MaxToolCalls == 0 {
		c.MaxToolCalls = 8
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Runner implements engine.Generator over a models directory.
type Runner struct {
	cfg    Config
	loader loader

	mu     sync.Mutex
	models map[string]*entry

	inFlight  atomic.Int64 // admitted requests not yet finished
	cancelled atomic.Int64 // generations stopped by their context
	peak      atomic.Int64 // highest weight+KV bytes seen

	wg     sync.WaitGroup // generation goroutines
	closed chan struct{}
}

// entry is one model of the models dir, loaded or not.
type entry struct {
	info engine.ModelInfo

	loadMu sync.Mutex // held while loading
	loaded *loadedModel
	// turn serialises generations on the model: a buffered channel of one,
	// so waiting for it can be cancelled.
	turn chan struct{}
}

type loadedModel struct {
	text  *prompt.Builder
	model languageModel
	// parser names the output parser family, detected from the template.
	parser string

	vocabOnce sync.Once
	vocab     *grammar.Vocab // for constrained decoding, built on first use
}

// New scans cfg.ModelsDir and loads cfg.Preload.
func New(cfg Config) (*Runner, error) {
	cfg.defaults()
	r := &Runner{cfg: cfg, models: map[string]*entry{}, closed: make(chan struct{}), loader: cpuLoader{threads: cfg.Threads, loadMode: cfg.LoadMode}}
	if err := r.rescan(); err != nil {
		return nil, err
	}
	for _, name := range cfg.Preload {
		e, err := r.entry(name)
		if err != nil {
			return nil, fmt.Errorf("preload %s: %w", name, err)
		}
		if _, err := r.load(e); err != nil {
			return nil, fmt.Errorf("preload %s: %w", name, err)
		}
	}
	return r, nil
}

// rescan adds models that appeared in the models dir since the last scan.
func (r *Runner) rescan() error {
	if r.cfg.ModelsDir == "" {
		return nil
	}
	found, err := modelfile.Discover(r.cfg.ModelsDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range found {
		if _, ok := r.models[f.Name]; ok {
			continue
		}
		info := engine.ModelInfo{ID: f.Name, Path: f.Path, Format: string(f.Kind)}
		if st, err := os.Stat(f.Path); err == nil {
			info.Created = st.ModTime().Unix()
		}
		r.models[f.Name] = &entry{info: info, turn: make(chan struct{}, 1)}
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

// load loads e once; concurrent callers wait for the same load.
func (r *Runner) load(e *entry) (*loadedModel, error) {
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	if e.loaded != nil {
		return e.loaded, nil
	}
	text, err := prompt.Load(e.info.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.info.ID, err)
	}
	m, err := r.loader.load(e.info)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, e.info.ID, err)
	}
	r.cfg.Logger.Info("model loaded", "model", e.info.ID, "weight_bytes", m.WeightBytes())
	e.loaded = &loadedModel{text: text, model: m, parser: parser.Detect(text.TemplateSource(), "")}
	return e.loaded, nil
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
		e.loadMu.Lock()
		info.Loaded = e.loaded != nil
		e.loadMu.Unlock()
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// textOf returns the prompt builder of a model, loading only its tokenizer
// and template when the model itself is not loaded.
func (r *Runner) textOf(name string) (*prompt.Builder, error) {
	e, err := r.entry(name)
	if err != nil {
		return nil, err
	}
	e.loadMu.Lock()
	lm := e.loaded
	e.loadMu.Unlock()
	if lm != nil {
		return lm.text, nil
	}
	b, err := prompt.Load(e.info.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", engine.ErrUnavailable, name, err)
	}
	return b, nil
}

// Tokenize renders and tokenizes as POST /tokenize does.
func (r *Runner) Tokenize(ctx context.Context, model string, req prompt.Request) (prompt.Result, error) {
	b, err := r.textOf(model)
	if err != nil {
		return prompt.Result{}, err
	}
	return b.Tokenize(req)
}

// Detokenize turns ids into text as POST /detokenize does.
func (r *Runner) Detokenize(ctx context.Context, model string, ids []int) (string, error) {
	b, err := r.textOf(model)
	if err != nil {
		return "", err
	}
	return b.Detokenize(ids)
}

// Stats are the runner's live figures.
type Stats struct {
	InFlight    int64 // admitted requests not yet finished
	Cancelled   int64 // generations stopped because their client went away
	WeightBytes int64 // weights of loaded models
	KVBytes     int64 // KV cache allocated by running generations
	PeakBytes   int64 // highest WeightBytes+KVBytes seen
}

// Stats returns the live figures.
func (r *Runner) Stats() Stats {
	s := Stats{InFlight: r.inFlight.Load(), Cancelled: r.cancelled.Load()}
	r.mu.Lock()
	for _, e := range r.models {
		e.loadMu.Lock()
		if e.loaded != nil {
			s.WeightBytes += e.loaded.model.WeightBytes()
			s.KVBytes += e.loaded.model.KVBytes()
		}
		e.loadMu.Unlock()
	}
	r.mu.Unlock()
	s.PeakBytes = r.notePeak(s.WeightBytes + s.KVBytes)
	return s
}

var _ engine.Generator = (*Runner)(nil)

// Close stops accepting work, waits for running generations (their
// contexts should be cancelled by then) and frees the models.
func (r *Runner) Close() error {
	select {
	case <-r.closed:
		return nil
	default:
		close(r.closed)
	}
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, e := range r.models {
		if e.loaded != nil {
			errs = append(errs, e.loaded.model.Close())
			e.loaded = nil
		}
	}
	return errors.Join(errs...)
}
