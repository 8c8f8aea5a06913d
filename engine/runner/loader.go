package runner

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"fusion/engine"
	"fusion/engine/backend"
	"fusion/engine/model"
)

// backendLoader loads models onto the backend the runner chose for each
// (see backends): one backend (CPU worker pool, or MLX thread) per model.
type backendLoader struct {
	threads  int
	loadMode string
	backends *backends
}

func (l backendLoader) load(info engine.ModelInfo) (languageModel, error) {
	be, kvBlock, _, err := l.backends.newBackend(info.ID, l.threads)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(context.Background(), info.Path, be, model.Options{Mmap: l.loadMode == "mmap"})
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	return &cpuModel{m: m, be: be, kvBlock: kvBlock, live: map[*cpuSequence]struct{}{}}, nil
}

// cpuModel adapts model.Model, on whichever backend, to the runner.
type cpuModel struct {
	m       *model.Model
	be      backend.Backend
	kvBlock int // positions the backend's KV caches grow by

	mu   sync.Mutex
	live map[*cpuSequence]struct{}
}

func (c *cpuModel) VocabSize() int     { return c.m.Config.VocabSize }
func (c *cpuModel) ContextLength() int { return c.m.Config.MaxPositionEmbeddings }
func (c *cpuModel) WeightBytes() int64 { return c.m.WeightBytes() }
func (c *cpuModel) Backend() string    { return c.be.Name() }
func (c *cpuModel) Close() error       { return errors.Join(c.m.Close(), c.be.Close()) }

// Recurrent: the model has layers whose state is not a KV cache (Gated
// DeltaNet), which the prefix cache and speculative decoding cannot
// rewind or restore.
func (c *cpuModel) Recurrent() bool { return c.m.Recurrent() }
func (c *cpuModel) KVBlock() (int, int64) {
	return c.kvBlock, c.m.KVBytesPerToken()
}

// StateBytes is the recurrent state a sequence holds in the loaded layers
// (allocated with it, whatever its length; 0 without DeltaNet layers).
func (c *cpuModel) StateBytes() int64 { return c.m.RecurrentBytes() }

func (c *cpuModel) KVBytes() (n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.live {
		n += s.kvBytes.Load()
	}
	return n
}

func (c *cpuModel) NewSequence(maxLen int) (sequence, error) {
	s, err := c.m.NewSequence(maxLen)
	if err != nil {
		return nil, err
	}
	cs := &cpuSequence{c: c, seq: s}
	alloc, _ := s.CacheBytes() // the recurrent state, allocated now
	cs.kvBytes.Store(alloc)
	c.mu.Lock()
	c.live[cs] = struct{}{}
	c.mu.Unlock()
	return cs, nil
}

// Forward runs one batched step: all inputs' rows through each matrix
// product together (model.Forward), the logits of each input's last token
// returned in input order.
func (c *cpuModel) Forward(ctx context.Context, inputs []stepInput) ([][]float32, error) {
	in := make([]model.Input, len(inputs))
	for i, x := range inputs {
		in[i] = model.Input{Seq: x.seq.(*cpuSequence).seq, Tokens: x.tokens, AllLogits: x.all}
	}
	out, err := c.m.Forward(ctx, in, model.Range{}, nil)
	for _, x := range inputs {
		s := x.seq.(*cpuSequence)
		alloc, _ := s.seq.CacheBytes()
		s.kvBytes.Store(alloc)
	}
	if err != nil {
		return nil, err
	}
	return out.Logits, nil
}

type cpuSequence struct {
	c   *cpuModel
	seq *model.Sequence // used only by the model's scheduler goroutine
	// kvBytes is the cache's allocated size, published after each step
	// for Stats (which runs on other goroutines).
	kvBytes atomic.Int64
}

func (s *cpuSequence) Bytes() int64 { return s.kvBytes.Load() }

func (s *cpuSequence) Release() {
	s.c.mu.Lock()
	delete(s.c.live, s)
	s.c.mu.Unlock()
	s.seq.Close()
	s.kvBytes.Store(0)
}
