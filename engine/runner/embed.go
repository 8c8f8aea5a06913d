package runner

import (
	"context"
	"errors"
	"fmt"

	"fusion/engine"
	"fusion/engine/backend"
	"fusion/engine/embed"
	"fusion/engine/prompt"
)

// DefaultMaxEmbedInputs caps the inputs of one embeddings request (as
// OpenAI does).
const DefaultMaxEmbedInputs = 2048

// embeddingModel is a loaded embedding model. Its batcher runs the
// passes, one at a time (a backend runs one step of a model at a time).
type embeddingModel struct {
	m     *embed.Model
	be    backend.Backend
	batch *embedBatcher // nil until start
}

func (l backendLoader) loadEmbedding(info engine.ModelInfo) (*embeddingModel, error) {
	be, _, _, err := l.backends.newBackend(info.ID, l.threads)
	if err != nil {
		return nil, err
	}
	m, err := embed.Load(context.Background(), info.Path, be, l.loadMode == "mmap")
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	return &embeddingModel{m: m, be: be}, nil
}

// start starts the model's batcher.
func (e *embeddingModel) start(maxTokens int, stats *embedStats) {
	e.batch = newEmbedBatcher(e.m, maxTokens, stats)
}

func (e *embeddingModel) close() error {
	if e.batch != nil {
		e.batch.close()
	}
	return errors.Join(e.m.Close(), e.be.Close())
}

func invalid(format string, a ...any) error {
	return &prompt.InvalidRequestError{Err: fmt.Errorf(format, a...)}
}

// Embed computes one vector per input on a model of the pool (loading
// it, evicting others, as Generate does). Inputs longer than the model's
// limit are cut to it and listed, unless NoTruncate asks for an error.
func (r *Runner) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	select {
	case <-r.closed:
		return nil, fmt.Errorf("%w: shutting down", engine.ErrUnavailable)
	default:
	}
	switch n := len(req.Inputs); {
	case n == 0:
		return nil, invalid("input must not be empty")
	case n > r.cfg.MaxEmbedInputs:
		return nil, invalid("input has %d items; this server takes at most %d per request", n, r.cfg.MaxEmbedInputs)
	}
	for i, in := range req.Inputs {
		if in.Tokens == nil && in.Text == "" {
			return nil, invalid("input[%d] is an empty string", i)
		}
		if in.Tokens != nil && len(in.Tokens) == 0 {
			return nil, invalid("input[%d] is an empty list of tokens", i)
		}
	}
	if req.Dimensions < 0 {
		return nil, invalid("dimensions must be positive, got %d", req.Dimensions)
	}
	if n := r.inFlight.Add(1); n > int64(r.cfg.MaxQueued) {
		r.inFlight.Add(-1)
		return nil, r.overloaded(n - 1)
	}
	defer r.inFlight.Add(-1)
	lm, release, err := r.acquire(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer release()
	em := lm.emb
	if em == nil {
		return nil, invalid("model %q is a %s model; it does not compute embeddings", req.Model, engine.KindChat)
	}
	m := em.m
	if d := req.Dimensions; d > 0 {
		if !m.Config.Matryoshka {
			return nil, invalid("model %q does not support dimensions (it was not trained for shortened vectors)", req.Model)
		}
		if d > m.Dimensions() {
			return nil, invalid("dimensions %d is over the model's %d", d, m.Dimensions())
		}
	}
	res := &engine.EmbedResult{}
	seqs := make([][]int, len(req.Inputs))
	for i, in := range req.Inputs {
		for _, id := range in.Tokens {
			if id < 0 || id >= m.VocabSize() {
				return nil, invalid("input[%d]: %d is not a token id of this model (vocabulary size %d)", i, id, m.VocabSize())
			}
		}
		ids, cut := m.Tokens(in.Text, in.Tokens)
		if cut {
			if req.NoTruncate {
				return nil, invalid("input[%d] is longer than the model's %d tokens", i, m.Config.MaxSeqLen)
			}
			res.Truncated = append(res.Truncated, i)
		}
		seqs[i] = ids
		res.PromptTokens += len(ids)
	}
	vecs, err := em.batch.embed(ctx, seqs, req.Dimensions)
	if err != nil {
		return nil, err
	}
	res.Vectors = vecs
	return res, nil
}
