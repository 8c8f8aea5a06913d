package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"fusion/engine"
	"fusion/engine/backend"
	"fusion/engine/embed"
	"fusion/engine/flux2"
	"fusion/engine/piper"
	"fusion/engine/prompt"
	"fusion/engine/rnnoise"
	"fusion/engine/silero"
	"fusion/engine/whisper"
)

// DefaultMaxEmbedInputs caps the inputs of one embeddings request (as
// OpenAI does).
const DefaultMaxEmbedInputs = 2048

// embeddingModel is a loaded model without a generation scheduler: an
// embedding model (m), a cross-encoder (ce) or a speech-to-text model
// (asr, see transcribe.go). A batcher runs the encoders' passes, one at a
// time (a backend runs one step of a model at a time); asrMu does the
// same for transcriptions.
type embeddingModel struct {
	m     *embed.Model        // nil for a cross-encoder
	ce    *embed.CrossEncoder // nil for an embedding model
	asr   *whisper.Model
	asrMu sync.Mutex
	tts   *piper.Voice // a text-to-speech voice (see speech.go)
	ttsMu sync.Mutex
	img   *flux2.Pipeline // an image model (image.go)
	vad   *silero.Model   // a voice activity detector (vad.go)
	vadMu sync.Mutex
	dn    *rnnoise.Model // a speech denoiser (denoise.go)
	dnMu  sync.Mutex
	be    backend.Backend
	batch *embedBatcher // nil until start
}

func (l backendLoader) loadEmbedding(info engine.ModelInfo) (*embeddingModel, error) {
	be, _, _, err := l.backends.newBackend(info.ID, l.threads)
	if err != nil {
		return nil, err
	}
	em := &embeddingModel{be: be}
	switch info.Kind {
	case engine.KindTranscription:
		em.asr, err = whisper.Load(context.Background(), info.Path, be)
	case engine.KindSpeech:
		em.tts, err = piper.Load(context.Background(), info.Path, be)
	case engine.KindImage:
		em.img, err = flux2.LoadPipeline(context.Background(), be, info.Path)
	case engine.KindVAD:
		em.vad, err = silero.Load(context.Background(), info.Path, be)
	case engine.KindDenoise:
		em.dn, err = rnnoise.Load(be, info.Path)
	case engine.KindRerank:
		em.ce, err = embed.LoadCrossEncoder(context.Background(), info.Path, be, l.loadMode == "mmap")
	default:
		em.m, err = embed.Load(context.Background(), info.Path, be, l.loadMode == "mmap")
	}
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	return em, nil
}

// start starts the model's batcher.
func (e *embeddingModel) start(maxTokens int, stats *embedStats) {
	if e.asr != nil || e.tts != nil || e.img != nil || e.vad != nil || e.dn != nil {
		return
	}
	if e.ce != nil {
		forward := func(seqs, types [][]int) ([][]float32, error) {
			scores, err := e.ce.Scores(context.Background(), seqs, types)
			out := make([][]float32, len(scores))
			for i := range scores {
				out[i] = scores[i : i+1]
			}
			return out, err
		}
		e.batch = newEmbedBatcher(forward, func(v []float32, _ int) []float32 { return v }, maxTokens, stats)
		return
	}
	forward := func(seqs, _ [][]int) ([][]float32, error) { return e.m.Pool(context.Background(), seqs) }
	e.batch = newEmbedBatcher(forward, e.m.Output, maxTokens, stats)
}

// weightBytes is the memory the backend holds for the weights.
func (e *embeddingModel) weightBytes() int64 {
	if e.dn != nil {
		return e.dn.Bytes()
	}
	if e.vad != nil {
		return e.vad.Bytes()
	}
	if e.img != nil {
		return e.img.WeightBytes()
	}
	if e.asr != nil {
		return e.asr.WeightBytes()
	}
	if e.tts != nil {
		return e.tts.Bytes()
	}
	if e.ce != nil {
		return e.ce.WeightBytes()
	}
	return e.m.WeightBytes()
}

// kind is the model's engine.Kind*.
func (e *embeddingModel) kind() string {
	if e.dn != nil {
		return engine.KindDenoise
	}
	if e.vad != nil {
		return engine.KindVAD
	}
	if e.img != nil {
		return engine.KindImage
	}
	if e.asr != nil {
		return engine.KindTranscription
	}
	if e.tts != nil {
		return engine.KindSpeech
	}
	if e.ce != nil {
		return engine.KindRerank
	}
	return engine.KindEmbedding
}

func (e *embeddingModel) close() error {
	if e.batch != nil {
		e.batch.close()
	}
	if e.asr != nil {
		return errors.Join(e.asr.Close(), e.be.Close())
	}
	if e.tts != nil {
		return errors.Join(e.tts.Close(), e.be.Close())
	}
	if e.img != nil {
		return errors.Join(e.img.Close(), e.be.Close())
	}
	if e.vad != nil {
		return errors.Join(e.vad.Close(), e.be.Close())
	}
	if e.dn != nil {
		return errors.Join(e.dn.Close(), e.be.Close())
	}
	if e.ce != nil {
		return errors.Join(e.ce.Close(), e.be.Close())
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
	em, done, err := r.enterEncoder(ctx, req.Model)
	if err != nil {
		return nil, err
	}
	defer done()
	if em == nil || em.m == nil {
		return nil, invalid("model %q is a%s %s model; it does not compute embeddings", req.Model, article(kindOf(em)), kindOf(em))
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
	prompt, err := embedPrompt(req, m)
	if err != nil {
		return nil, err
	}
	res := &engine.EmbedResult{}
	seqs := make([][]int, len(req.Inputs))
	for i, in := range req.Inputs {
		for _, id := range in.Tokens {
			if id < 0 || id >= m.VocabSize() {
				return nil, invalid("input[%d]: %d is not a token id of this model (vocabulary size %d)", i, id, m.VocabSize())
			}
		}
		text := in.Text
		if in.Tokens == nil {
			text = prompt + text
		}
		ids, cut := m.Tokens(text, in.Tokens)
		if cut {
			if req.NoTruncate {
				return nil, invalid("input[%d] is longer than the model's %d tokens", i, m.Config.MaxSeqLen)
			}
			res.Truncated = append(res.Truncated, i)
		}
		seqs[i] = ids
		res.PromptTokens += len(ids)
	}
	vecs, err := em.batch.embed(ctx, seqs, nil, req.Dimensions)
	if err != nil {
		return nil, err
	}
	res.Vectors = vecs
	return res, nil
}

// embedPrompt is the text put before each text input of req: the one it
// gives, or the model's prompt it names, or the model's default.
func embedPrompt(req *engine.EmbedRequest, m *embed.Model) (string, error) {
	prompt, err := m.Prompt(req.PromptName, req.Prompt)
	if err != nil {
		return "", invalid("%v", err)
	}
	asked := req.Prompt != nil || req.PromptName != ""
	if asked && prompt != "" {
		for i, in := range req.Inputs {
			if in.Tokens != nil {
				return "", invalid("input[%d] is token ids: a prompt applies to text inputs only", i)
			}
		}
	}
	if prompt != "" && m.Config.ExcludePrompt {
		return "", invalid("model %q pools without its prompt tokens (include_prompt false), which this server does not do; send the text without a prompt", req.Model)
	}
	return prompt, nil
}

// enterEncoder admits a request on an encoder model once its input is
// checked: refused while shutting down or when MaxQueued requests are in
// flight, else the model acquired (loading it if need be). em is nil for
// a chat model. done ends the request.
func (r *Runner) enterEncoder(ctx context.Context, model string) (em *embeddingModel, done func(), err error) {
	select {
	case <-r.closed:
		return nil, nil, fmt.Errorf("%w: shutting down", engine.ErrUnavailable)
	default:
	}
	if n := r.inFlight.Add(1); n > int64(r.cfg.MaxQueued) {
		r.inFlight.Add(-1)
		return nil, nil, r.overloaded(n - 1)
	}
	lm, release, err := r.acquire(ctx, model)
	if err != nil {
		r.inFlight.Add(-1)
		return nil, nil, err
	}
	return lm.emb, func() { release(); r.inFlight.Add(-1) }, nil
}

// kindOf is the engine.Kind* of a model enterEncoder returned.
func kindOf(em *embeddingModel) string {
	if em == nil {
		return engine.KindChat
	}
	return em.kind()
}
