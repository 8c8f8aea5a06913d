package runner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"fusion/engine"
	"fusion/engine/backend"
	"fusion/engine/model"
	"fusion/engine/modelfile"
	"fusion/engine/prefixcache"
)

// This file is the engine's side of pipeline stages (a model sharded by
// layer ranges across nodes). The first stage is an ordinary loaded model
// of the pool whose forward pass runs its own layers and hands the hidden
// state to a Downstream (the later stages, over the network), so the
// scheduler, sampling, stops and output parsing are the same code as on
// one node. A later stage is a StageModel: only its layers, driven by the
// pipeline service, outside the scheduler.

// StageSeq is one sequence's part of a pipeline step.
type StageSeq struct {
	ID  uint64 // unique within the pipeline
	Len int    // new positions this step
	// MaxLen is the positions the sequence may hold; set on its first
	// step only (the later stages make its KV cache then).
	MaxLen int
	// Sampler, on the first step only, has the last stage keep a sampler
	// for the sequence (see stagesample.go); Tokens are then the ids of
	// every step's rows, and Draw asks for this step's token.
	Sampler *StageSampler
	Tokens  []int
	Draw    *StageDraw
	// Trace, on the first step only, is the W3C traceparent of the
	// request's span ("" when it is not traced): the later stages put
	// their span of the sequence in the request's trace.
	Trace string
}

// Downstream runs the layers after the first stage's.
type Downstream interface {
	// Step sends one step's hidden state (rows in seqs' order) down the
	// pipeline and returns, for each sequence, the token the last stage
	// drew (when the step asked for one) or the logits of its last new
	// token. An error fails the step's sequences: their KV on the later
	// stages may be gone.
	Step(ctx context.Context, seqs []StageSeq, hidden *model.Hidden) ([]StageResult, error)
	// Free drops sequences' KV on the later stages (best effort: a
	// broken pipeline has dropped them already).
	Free(ids []uint64)
	// Close ends the pipeline's stream for good.
	Close() error
}

// Starter is a Downstream that can send a step without waiting for its
// answer, so that several micro-batches are in flight down the pipeline
// at once. Start sends the step (hidden may be reused once it returns)
// and wait blocks for its answer as Step would; steps are taken by the
// next stage in the order they were started. A Downstream without Start
// is driven from a goroutine per step instead.
type Starter interface {
	Downstream
	Start(ctx context.Context, seqs []StageSeq, hidden *model.Hidden) (wait func() ([]StageResult, error), err error)
}

// Prefixer is a Downstream whose later stages keep a prefix cache each
// (the pipeline's prefix cache: every stage holds its own layers' KV of
// a prompt's blocks, under keys derived with StageBlockKey from the
// chained keys the first stage computes).
type Prefixer interface {
	// Restore opens sequence id (of maxLen positions) on the later
	// stages, each importing from its cache the blocks of keys it holds
	// (block positions each, from the first, at most limit positions);
	// it returns the positions every one of them restored, which they
	// keep (0: none; the sequence is open all the same).
	Restore(ctx context.Context, id uint64, maxLen int, keys []prefixcache.Key, block, limit int) (int, error)
	// Save has the later stages put blocks [first, first+len(keys)) of
	// sequence id into their caches (best effort).
	Save(id uint64, block, first int, keys []prefixcache.Key)
}

// StageBlockKey is the prefix-cache key of a block as a pipeline stage
// holds it: the block's chained key (the whole prompt up to it, see
// prefixcache.Chain) and the stage's own key (its model, backend, KV
// layout and layers: StageCacheKey).
func StageBlockKey(stage, chain prefixcache.Key) prefixcache.Key {
	return prefixcache.ModelKey("pipeline stage block", hex.EncodeToString(stage[:]), hex.EncodeToString(chain[:]))
}

// StageCacheKey is the prefix-cache identity of layers of a model of the
// models dir as a pipeline stage of this runner holds them.
func (r *Runner) StageCacheKey(name string, layers model.Range) (prefixcache.Key, error) {
	e, err := r.entry(name)
	if err != nil {
		return prefixcache.Key{}, err
	}
	return modelCacheKeyOf(e.info.Path, r.backends.forModel(e.info.ID), r.backends.kvLayout(e.info.ID), "layers="+layers.String())
}

// PrefixCache is the runner's prefix cache (nil when it is off); the
// pipeline stages on this node keep their blocks in it.
func (r *Runner) PrefixCache() *prefixcache.Cache { return r.pcache }

// Pipeline is this node's part of a sharded model as its first stage.
type Pipeline struct {
	Layers     model.Range // this node's layers; Start must be 0
	Generation uint64      // the placement's generation
	Down       Downstream
	// LogitsBack has the last stage send logits back for the first stage
	// to sample, instead of sampling there (the bench compares the two).
	LogitsBack bool
	// Stages is the pipeline's length (0: 2).
	Stages int
	// MicroBatches is how many micro-batches the running sequences are
	// split into, each in flight at its own stage (0: one per stage; 1:
	// one step over the whole batch at a time, as before).
	MicroBatches int

	weights int64 // what its layers' weights hold, for the pool's size estimate (0: the whole files)
}

// ErrPipelineStage: a pipeline's later stage failed or went away. It
// wraps engine.ErrUnavailable (retryable).
var ErrPipelineStage = fmt.Errorf("%w: pipeline stage lost", engine.ErrUnavailable)

// SetPipeline makes name run as the first stage of a pipeline: the model
// is (re)loaded with only p.Layers, and its steps continue on p.Down. A
// nil p returns the model to a whole local model (unloaded; the next
// request loads it). It refuses with ErrBusy while the model has requests
// in flight (p.Down then stays the caller's). The runner closes p.Down
// when the pipeline is replaced or the runner closed; an unload or an
// eviction keeps it (a later load runs the same pipeline).
func (r *Runner) SetPipeline(ctx context.Context, name string, p *Pipeline) error {
	if p != nil && (p.Layers.Start != 0 || p.Layers.Len() <= 0 || p.Down == nil) {
		return fmt.Errorf("runner: pipeline of %s: a first stage needs layers from 0 and a downstream, got %v", name, p.Layers)
	}
	if p != nil {
		if e, err := r.entry(name); err == nil {
			p.weights = r.stageWeights(name, p.Layers, estimateBytes(e.info.Path))
		}
	}
	// The plan goes in before the unload, so that a request arriving in
	// between loads the pipeline, never the whole model.
	r.mu.Lock()
	if r.pipelines == nil {
		r.pipelines = map[string]*Pipeline{}
	}
	old := r.pipelines[name]
	set := func(p *Pipeline) {
		if p == nil {
			delete(r.pipelines, name)
		} else {
			r.pipelines[name] = p
		}
	}
	set(p)
	r.mu.Unlock()
	if err := r.Unload(ctx, name); err != nil {
		r.mu.Lock()
		set(old)
		r.mu.Unlock()
		return err
	}
	if old != nil {
		if err := old.Down.Close(); err != nil {
			r.cfg.Logger.Debug("closing a replaced pipeline", "model", name, "err", err)
		}
	}
	if p == nil {
		return nil
	}
	return r.Load(ctx, name)
}

// Pipelines names the models set to run as a first stage, sorted.
func (r *Runner) Pipelines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.pipelines))
	for name := range r.pipelines {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// PipelineOf returns the pipeline name runs in, if any.
func (r *Runner) PipelineOf(name string) (Pipeline, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pipelines[name]
	if !ok {
		return Pipeline{}, false
	}
	return *p, true
}

// loadPipeline loads the first stage of info's pipeline. Weights are
// memory-mapped, so the other layers' tensors are never read.
func (r *Runner) loadPipeline(info engine.ModelInfo, p *Pipeline) (languageModel, error) {
	be, kvBlock, _, err := r.backends.newBackend(info.ID, r.cfg.Threads)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(context.Background(), info.Path, be, model.Options{Layers: p.Layers, Mmap: true})
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	if p.Layers.End >= m.Config.NumHiddenLayers {
		return nil, errors.Join(fmt.Errorf("runner: pipeline of %s: the first stage %v holds every layer", info.ID, p.Layers), m.Close(), be.Close())
	}
	pm := &pipelineModel{cpuModel: &cpuModel{m: m, be: be, kvBlock: kvBlock, live: map[*cpuSequence]struct{}{}}, p: p}
	pm.stageKey, pm.keyErr = modelCacheKeyOf(info.Path, r.backends.forModel(info.ID), r.backends.kvLayout(info.ID), "layers="+p.Layers.String())
	return pm, nil
}

// pipelineModel is the first stage of a pipeline as the scheduler's model.
type pipelineModel struct {
	*cpuModel // this node's layers
	p         *Pipeline
	nextID    uint64 // owned by the scheduler goroutine (NewSequence)
	// stageKey is the prefix-cache identity of this stage's layers;
	// keyErr, if set, turns the pipeline's prefix cache off.
	stageKey prefixcache.Key
	keyErr   error
}

// wholeRecurrent reports whether a layer of the whole model, on any
// stage, is a Gated DeltaNet one.
func (pm *pipelineModel) wholeRecurrent() bool {
	c := pm.m.Config
	for l := range c.NumHiddenLayers {
		if c.DeltaNet.Linear(l) {
			return true
		}
	}
	return false
}

func (pm *pipelineModel) NewSequence(maxLen int) (sequence, error) {
	s, err := pm.cpuModel.NewSequence(maxLen)
	if err != nil {
		return nil, err
	}
	pm.nextID++
	return &pipeSequence{local: s.(*cpuSequence), pm: pm, id: pm.nextID}, nil
}

// MicroBatches is the scheduler's split of the running sequences.
func (pm *pipelineModel) MicroBatches() int {
	if pm.p.MicroBatches > 0 {
		return pm.p.MicroBatches
	}
	return max(pm.p.Stages, 2)
}

// Forward runs this node's layers over the batch, then the later stages.
// If they fail, the local caches are rewound too and the error wraps
// ErrPipelineStage.
func (pm *pipelineModel) Forward(ctx context.Context, inputs []stepInput) ([][]float32, error) {
	wait, err := pm.Launch(ctx, inputs)
	if err != nil {
		return nil, err
	}
	return wait()
}

// Launch runs this node's layers over the batch and sends the hidden
// state down the pipeline; wait takes the later stages' answer (as
// Forward's). The scheduler launches the next micro-batch in between.
func (pm *pipelineModel) Launch(ctx context.Context, inputs []stepInput) (func() ([][]float32, error), error) {
	in := make([]model.Input, len(inputs))
	seqs := make([]StageSeq, len(inputs))
	before := make([]int, len(inputs))
	for i, x := range inputs {
		s := x.seq.(*pipeSequence)
		before[i] = s.local.seq.Len()
		in[i] = model.Input{Seq: s.local.seq, Tokens: x.tokens}
		seqs[i] = StageSeq{ID: s.id, Len: len(x.tokens)}
		if !s.started {
			if !s.opened {
				seqs[i].MaxLen = s.local.seq.MaxLen()
			}
			if x.gen != nil {
				if t, ok := x.gen.phases.(engine.Traced); ok {
					seqs[i].Trace = t.TraceParent()
				}
			}
			if !pm.p.LogitsBack && x.gen != nil {
				seqs[i].Sampler = x.gen.stageSampler()
				if s.opened { // by a Restore: the restored tokens and the positions
					seqs[i].Sampler.Prefix = x.gen.prompt[:before[i]:before[i]]
					seqs[i].Sampler.MaxLen = s.local.seq.MaxLen()
				}
				s.sampled = true
			}
		}
		if s.sampled {
			seqs[i].Tokens = x.tokens
			seqs[i].Draw = x.gen.stageDraw(len(x.tokens))
		}
	}
	out, err := pm.m.Forward(ctx, in, pm.p.Layers, nil)
	for _, x := range inputs {
		s := x.seq.(*pipeSequence)
		alloc, _ := s.local.seq.CacheBytes()
		s.local.kvBytes.Store(alloc)
	}
	if err != nil {
		return nil, err
	}
	rewind := func(err error) error {
		for i, x := range inputs {
			x.seq.(*pipeSequence).local.seq.Truncate(before[i])
		}
		if errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("%w: %v", ErrPipelineStage, err)
	}
	wait, err := pm.start(ctx, seqs, out.Hidden)
	if err != nil {
		return nil, rewind(err)
	}
	for _, x := range inputs {
		s := x.seq.(*pipeSequence)
		s.started = true
	}
	return func() ([][]float32, error) {
		res, err := wait()
		if err == nil && len(res) != len(inputs) {
			err = fmt.Errorf("%w: %d answers for %d sequences", ErrPipelineStage, len(res), len(inputs))
		}
		if err != nil {
			return nil, rewind(err)
		}
		logits := make([][]float32, len(inputs))
		for i, r := range res {
			logits[i] = r.Logits
			switch {
			case r.Drawn != nil && seqs[i].Draw != nil:
				inputs[i].gen.drawn = r.Drawn
			case r.Logits == nil && (seqs[i].Draw != nil || !inputs[i].seq.(*pipeSequence).sampled):
				return nil, fmt.Errorf("%w: sequence %d: neither a token nor logits came back", ErrPipelineStage, seqs[i].ID)
			}
		}
		return logits, nil
	}, nil
}

// start sends a step down the pipeline: through Starter when the
// downstream has it, else on a goroutine of its own (with a copy of the
// hidden state, which the next local forward may reuse).
func (pm *pipelineModel) start(ctx context.Context, seqs []StageSeq, h *model.Hidden) (func() ([]StageResult, error), error) {
	if st, ok := pm.p.Down.(Starter); ok {
		return st.Start(ctx, seqs, h)
	}
	h = &model.Hidden{Rows: h.Rows, Cols: h.Cols, Data: slices.Clone(h.Data)}
	type answer struct {
		res []StageResult
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := pm.p.Down.Step(ctx, seqs, h)
		ch <- answer{res, err}
	}()
	return func() ([]StageResult, error) {
		a := <-ch
		return a.res, a.err
	}, nil
}

// pipeSequence is a sequence of the first stage: its local KV, and an id
// the later stages know it by. It is not a kvSequence on purpose: the
// prefix cache holds whole-model KV, and this node has only its layers'.
type pipeSequence struct {
	local   *cpuSequence
	pm      *pipelineModel
	id      uint64
	sampled bool // the last stage keeps a sampler for it
	started bool // the later stages have had its first step
	opened  bool // the later stages opened it with a restored prefix (Prefixer.Restore)
	stored  int  // blocks of it the later stages were told to save
}

func (s *pipeSequence) Bytes() int64 { return s.local.Bytes() }

func (s *pipeSequence) Release() {
	s.local.Release()
	s.pm.p.Down.Free([]uint64{s.id})
}

// StageModel is a later stage of a pipeline on this node: only its
// layers, loaded from memory-mapped weights (the other layers' tensors
// are never read).
type StageModel struct {
	*model.Model
	be   backend.Backend
	r    *Runner
	held int64 // what it counts against the memory budget
	once sync.Once
}

// LoadStage loads the layers of name for a later pipeline stage, on the
// backend the runner picks for the model. It is not a model of the pool
// (never evicted), but its share of the weights counts against
// MemoryBudget until Close: idle unpinned models are evicted to make room,
// and a stage that does not fit even so is refused with ErrOverBudget.
func (r *Runner) LoadStage(ctx context.Context, name string, layers model.Range) (*StageModel, error) {
	e, err := r.entry(name)
	if err != nil {
		return nil, err
	}
	need := r.stageWeights(name, layers, estimateBytes(e.info.Path))
	r.mu.Lock()
	victims, err := r.makeRoom(nil, need)
	if err != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w (a pipeline stage of layers %v)", err, layers)
	}
	r.stageBytes += need
	r.mu.Unlock()
	for _, v := range victims {
		if err := v.close(); err != nil {
			r.cfg.Logger.Warn("closing an evicted model", "err", err)
		}
	}
	sm := &StageModel{r: r, held: need}
	sm.be, _, _, err = r.backends.newBackend(name, r.cfg.Threads)
	if err == nil {
		sm.Model, err = model.Load(ctx, e.info.Path, sm.be, model.Options{Layers: layers, Mmap: true})
		if err != nil {
			err = errors.Join(fmt.Errorf("%w: %s %v: %v", engine.ErrUnavailable, name, layers, err), sm.be.Close())
		}
	}
	if err != nil {
		sm.release()
		return nil, err
	}
	// Loaded, the stage counts what its weights hold, as the pool's models
	// do: the files' bytes were the estimate (the CPU backend's AVX-512
	// F32 panels pad a matrix's rows to 16, a mixture's 4-expert router
	// from 4 to 16).
	r.mu.Lock()
	r.stageBytes += sm.WeightBytes() - sm.held
	sm.held = sm.WeightBytes()
	r.mu.Unlock()
	r.cfg.Logger.Info("pipeline stage loaded", "model", name, "layers", layers.String(), "weight_bytes", sm.WeightBytes())
	return sm, nil
}

// release gives the stage's share of the budget back.
func (s *StageModel) release() {
	s.once.Do(func() {
		s.r.mu.Lock()
		s.r.stageBytes -= s.held
		s.r.mu.Unlock()
	})
}

// Close frees the stage's weights and backend, and its share of the
// memory budget.
func (s *StageModel) Close() error {
	defer s.release()
	return errors.Join(s.Model.Close(), s.be.Close())
}

// ModelNeed is the memory the planner counts for a chat model: its weight
// files plus the float32 KV cache of one sequence at the configured
// context (the model's, or its settings' cap) in the layers that have
// one, and the recurrent state of one sequence in its Gated DeltaNet
// layers (fixed, whatever the context). 0 for a model it cannot tell (as
// NumLayers).
func (r *Runner) ModelNeed(name string) int64 {
	c, path := r.chatConfig(name)
	if c == nil {
		return 0
	}
	ctxLen := r.contextOf(name, c)
	var state int64
	for l := range c.NumHiddenLayers {
		state += layerState(c, l, ctxLen)
	}
	return estimateBytes(path) + state
}

// contextOf is the context a chat model runs at: the model's, or its
// settings' cap.
func (r *Runner) contextOf(name string, c *modelfile.Config) int {
	ctxLen := c.MaxPositionEmbeddings
	if capped := r.modelSettings(name).ContextLength; capped > 0 && (ctxLen <= 0 || capped < ctxLen) {
		ctxLen = capped
	}
	return max(ctxLen, 0)
}

// layerState is what one sequence holds in layer l: the float32 KV cache
// of ctxLen positions, or a Gated DeltaNet layer's recurrent state
// (fixed, whatever the context).
func layerState(c *modelfile.Config, l, ctxLen int) int64 {
	if c.DeltaNet.Linear(l) {
		return int64(c.DeltaNet.StateFloats()) * 4
	}
	return c.KVFloatsOfLayer(l) * 4 * int64(ctxLen)
}

// StageCosts is what the planner sizes and balances a chat model's
// pipeline stages by, from its weight files' tensor table
// (model.Footprint): a stage of layers [a, b) needs the sum of Bytes[a:b],
// plus First when a is 0 and Last when b is the last layer, and costs the
// sum of Compute[a:b] per token, plus Head on the last stage.
type StageCosts struct {
	// Bytes is, per layer, its weights (all of a mixture's experts) and
	// what one sequence holds in it (layerState).
	Bytes []int64
	// First is the embeddings the first stage holds; Last the final norm
	// and the head the last stage holds (the embeddings again when tied).
	First, Last int64
	// Compute is, per layer, the weights one token reads (a mixture's
	// routed share of its experts) over the mean layer's; Head the
	// output head's in the same units.
	Compute []float64
	Head    float64
}

// StageCosts returns a chat model's StageCosts (false when it cannot
// tell, as NumLayers, or its files cannot be read).
func (r *Runner) StageCosts(name string) (StageCosts, bool) {
	c, fp, ok := r.footprint(name)
	if !ok {
		return StageCosts{}, false
	}
	sc := StageCosts{Bytes: make([]int64, c.NumHiddenLayers), First: fp.First, Last: fp.Last}
	ctxLen := r.contextOf(name, c)
	for l := range sc.Bytes {
		sc.Bytes[l] = fp.Bytes[l] + layerState(c, l, ctxLen)
	}
	sc.Compute, sc.Head = fp.Compute()
	return sc, true
}

// footprint is a chat model's config and its tensors filed by layer.
func (r *Runner) footprint(name string) (*modelfile.Config, modelfile.Footprint, bool) {
	if c, _ := r.chatConfig(name); c == nil {
		return nil, modelfile.Footprint{}, false
	}
	e, err := r.entry(name)
	if err != nil {
		return nil, modelfile.Footprint{}, false
	}
	c, fp, err := model.Footprint(e.info.Path)
	if err != nil || len(fp.Bytes) != c.NumHiddenLayers {
		return nil, modelfile.Footprint{}, false
	}
	return c, fp, true
}

// stageWeights is what the weights of layers of a chat model hold: the
// layers' tensors, the embeddings on a first stage, the norm and head on
// a last one (model.Footprint); else, when the files cannot tell, the
// layers' share of whole, all bytes.
func (r *Runner) stageWeights(name string, layers model.Range, whole int64) int64 {
	if _, fp, ok := r.footprint(name); ok && layers.Start >= 0 && layers.End <= len(fp.Bytes) && layers.Len() > 0 {
		var n int64
		for _, b := range fp.Bytes[layers.Start:layers.End] {
			n += b
		}
		if layers.Start == 0 {
			n += fp.First
		}
		if layers.End == len(fp.Bytes) {
			n += fp.Last
		}
		return n
	}
	if n := r.NumLayers(name); n > 0 && layers.Len() > 0 && layers.Len() < n {
		return whole * int64(layers.Len()) / int64(n)
	}
	return whole
}

// MemoryBudget is the budget the weights of this node's models (and
// pipeline stages) may hold.
func (r *Runner) MemoryBudget() int64 { return r.cfg.MemoryBudget }

// closePipelines ends every pipeline's downstream (the runner is closing).
func (r *Runner) closePipelines() error {
	r.mu.Lock()
	ps := r.pipelines
	r.pipelines = nil
	r.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Down.Close())
	}
	return errors.Join(errs...)
}

// HeadLayers is a chat model's output head counted in layers of compute
// per token: from its files (StageCosts.Head), else its configuration
// (modelfile.Config.HeadLayers); 0 when it cannot tell, as NumLayers.
// What the planner adds to the last stage of a pipeline.
func (r *Runner) HeadLayers(name string) float64 {
	if sc, ok := r.StageCosts(name); ok && sc.Head > 0 {
		return sc.Head
	}
	if c, _ := r.chatConfig(name); c != nil {
		return c.HeadLayers()
	}
	return 0
}

// MaxCut is the last layer a later pipeline stage of a chat model may
// start at (modelfile.Config.MaxCut; 0 when it cannot tell, as
// NumLayers): what the planner keeps stage boundaries within.
func (r *Runner) MaxCut(name string) int {
	if c, _ := r.chatConfig(name); c != nil {
		return c.MaxCut()
	}
	return 0
}

// NumLayers is the number of layers a chat model's configuration gives
// (a GGUF file's from its metadata; 0 for a model it cannot tell: an
// embedding model, a missing or bad config, a GGUF file this engine
// cannot load).
func (r *Runner) NumLayers(name string) int {
	if c, _ := r.chatConfig(name); c != nil {
		return c.NumHiddenLayers
	}
	return 0
}

// chatConfig is the configuration of a chat model and its path: a
// safetensors directory's config.json, a GGUF file's metadata as the
// models list reads it (nil for any other model, a missing or bad
// config, or a GGUF file this engine cannot load). Read only.
func (r *Runner) chatConfig(name string) (*modelfile.Config, string) {
	e, err := r.entry(name)
	if err != nil || e.info.Kind != engine.KindChat {
		return nil, ""
	}
	var c *modelfile.Config
	switch e.info.Format {
	case string(modelfile.KindSafetensors):
		c, err = modelfile.LoadConfig(e.info.Path)
	case string(modelfile.KindGGUF):
		c, err = r.ggufInfo.get(e.info.Path)
	default:
		return nil, ""
	}
	if err != nil || c == nil {
		return nil, ""
	}
	return c, e.info.Path
}
