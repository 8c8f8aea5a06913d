package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"fusion/engine/backend"
	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
)

// Range is a contiguous range of layers [Start, End).
type Range struct{ Start, End int }

// Len is the number of layers in r.
func (r Range) Len() int { return r.End - r.Start }

func (r Range) String() string { return fmt.Sprintf("[%d, %d)", r.Start, r.End) }

// contains reports whether r holds every layer of s.
func (r Range) contains(s Range) bool { return s.Start >= r.Start && s.End <= r.End }

// Options control Load.
type Options struct {
	// Layers to load; the zero Range means all. A model that does not
	// start at layer 0 has no embedding, one that does not end at the last
	// layer no final norm and LM head (pipeline stages).
	Layers Range
	// Mmap memory-maps the weight files instead of reading them.
	Mmap bool
	// NoHead loads no LM head: the model gives hidden states (States), not
	// logits, as a decoder embedding model does (Qwen3-Embedding ships
	// without lm_head).
	NoHead bool
}

// Model is a loaded model: the weights of its layer range on a backend.
// Forward may run concurrently on distinct sequences.
type Model struct {
	Config *modelfile.Config
	Layers Range // the loaded layers
	// Format is "safetensors" or "gguf".
	Format string

	be      backend.Backend
	src     source
	blocks  []block // Layers.Start … End−1
	embed   backend.Weight
	norm    backend.Vector
	head    backend.Weight
	rope    *backend.RoPE
	headDim int // also the KV cache's head width
	// headDims is each layer's head width where they differ (nil: all
	// headDim; Gemma 4's wider full-attention layers).
	headDims []int
	kvHeads  int // the KV cache's heads (1 for latent attention)
	eps      float32
	scale    float32
	// Per layer (nil: none differ): the attention window (0: causal
	// over all positions) and the RoPE (nil: rope).
	windows []int
	ropes   []*backend.RoPE
	// embedScale multiplies the embeddings (0: none); normOffset is added
	// to every norm weight as it loads (Gemma's 1 + w); softcap caps the
	// logits (0: none).
	embedScale, normOffset, softcap float32
	// kvFrom maps each layer to the layer whose KV cache it reads (nil:
	// each its own; Gemma 4's KV sharing); gemma4 holds its per-layer
	// inputs' weights (nil for other families or without them).
	kvFrom []int
	gemma4 *gemma4Extra
	bytes  int64
	// Everything uploaded, released by Close (see backend.Releaser).
	weights []backend.Weight
	vectors []backend.Vector
}

// Load opens the model at path (a model directory or a .gguf file) and
// loads the weights of opts.Layers onto be. The weight files stay open
// (backends may use their bytes in place) until Close.
func Load(ctx context.Context, path string, be backend.Backend, opts Options) (*Model, error) {
	m := &Model{be: be}
	var ggufFile *gguf.File
	if st, err := os.Stat(path); err == nil && !st.IsDir() || strings.HasSuffix(path, ".gguf") {
		mode := gguf.LoadRead
		if opts.Mmap {
			mode = gguf.LoadMmap
		}
		f, err := gguf.Open(path, mode)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		ggufFile, m.src, m.Format = f, ggufSource{f}, "gguf"
		if m.Config, err = ggufConfig(f); err != nil {
			return nil, errors.Join(fmt.Errorf("model: %w", err), f.Close())
		}
	} else {
		mode := safetensors.LoadRead
		if opts.Mmap {
			mode = safetensors.LoadMmap
		}
		// Open checks the embedding under its "model." name and the LM
		// head, which a bare decoder without its head lacks: with NoHead
		// the weights open unchecked (the loader checks each one's shape).
		mf, err := modelfile.Open(path, modelfile.Options{LoadMode: mode, ConfigOnly: opts.NoHead})
		if err == nil && opts.NoHead {
			mf.Weights, err = modelfile.OpenWeights(path, mode)
		}
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		m.Config, m.src, m.Format = mf.Config, safetensorsSource{mf}, "safetensors"
		if !m.src.has("model.embed_tokens.weight") && m.src.has("embed_tokens.weight") {
			// A checkpoint saved from the bare decoder (Qwen3Model, as
			// Qwen3-Embedding is): its names lack the "model." prefix.
			m.src = bareSource{m.src}
		}
	}
	if err := m.load(ctx, opts, ggufFile); err != nil {
		m.release()
		return nil, errors.Join(fmt.Errorf("model: %s: %w", path, err), m.src.close())
	}
	return m, nil
}

func (m *Model) load(ctx context.Context, opts Options, ggufFile *gguf.File) error {
	c := m.Config
	arch, ok := architectures[c.Architecture]
	if !ok {
		return fmt.Errorf("%w: %q", modelfile.ErrUnknownArchitecture, c.Architecture)
	}
	m.Layers = opts.Layers
	if m.Layers == (Range{}) {
		m.Layers = Range{0, c.NumHiddenLayers}
	}
	if m.Layers.Start < 0 || m.Layers.End > c.NumHiddenLayers || m.Layers.Len() <= 0 {
		return fmt.Errorf("layers %v outside the model's [0, %d)", m.Layers, c.NumHiddenLayers)
	}
	m.headDim = arch.headDim(c)
	m.kvHeads, _ = c.KVDims()
	if m.headDim <= 0 || m.headDim%2 != 0 {
		return fmt.Errorf("%w: head dim %d", modelfile.ErrInvalidConfig, m.headDim)
	}
	m.eps = float32(c.RMSNormEps)
	m.scale = float32(1 / math.Sqrt(float64(m.headDim)))
	// llama.cpp stores a llama's q/k rows interleaved per head (see
	// gguf.NeedsQKPermute): rotating adjacent pairs of that layout is the
	// same rotation, and q·k is unchanged by the common permutation.
	interleaved := ggufFile != nil && gguf.NeedsQKPermute(c.Architecture)
	var err error
	if m.rope, err = newRoPE(c, m.headDim, interleaved); err != nil {
		return err
	}
	if ggufFile != nil && m.rope.Freqs == nil {
		if m.rope.Freqs, err = ggufRopeFreqs(ggufFile, c.RopeTheta, m.headDim); err != nil {
			return err
		}
	}

	if arch.setup != nil {
		if err := arch.setup(m); err != nil {
			return err
		}
	}

	w := &loader{src: m.src, be: m.be, cfg: c, normOffset: m.normOffset, dims: dims{
		hidden: c.HiddenSize, intermediate: c.IntermediateSize, vocab: c.VocabSize,
		heads: c.NumAttentionHeads, kvHeads: c.NumKeyValueHeads, headDim: m.headDim, mla: c.MLA,
	}}
	// Kept on every return, so that a failed load releases what it made.
	defer func() { m.weights, m.vectors = w.weights, w.vectors }()
	if m.Layers.Start == 0 {
		m.embed = w.linear("model.embed_tokens")
		if arch.loadModel != nil {
			arch.loadModel(m, w)
		}
	}
	for i := m.Layers.Start; i < m.Layers.End; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.layer = i
		m.blocks = append(m.blocks, arch.load(w, fmt.Sprintf("model.layers.%d.", i)))
	}
	if m.Layers.End == c.NumHiddenLayers {
		m.norm = w.vector("model.norm.weight")
		switch {
		case opts.NoHead:
		case !c.TieWordEmbeddings:
			m.head = w.linear("lm_head")
		case m.embed != nil:
			m.head = m.embed
		default:
			m.head = w.linear("model.embed_tokens")
		}
	}
	m.bytes = w.bytes
	return w.err
}

// release frees what the backend holds for the model's weights, if it
// holds anything of its own.
func (m *Model) release() {
	if r, ok := m.be.(backend.Releaser); ok && (len(m.weights) > 0 || len(m.vectors) > 0) {
		r.Release(m.weights, m.vectors)
	}
	m.weights, m.vectors = nil, nil
}

// WeightBytes is the exact memory the backend holds for the loaded
// weights (a tied embedding counted once).
func (m *Model) WeightBytes() int64 { return m.bytes }

// KVBytesPerToken is the KV cache memory of one position over the loaded
// layers, at float32.
func (m *Model) KVBytesPerToken() int64 {
	if m.attentionLayers() == 0 {
		return 0 // a range of DeltaNet layers alone
	}
	return int64(m.kvSpec(1).PosFloats()) * 4
}

// kvSpec is the KV cache of a sequence of up to maxLen positions: the
// layers with a cache of their own, each at its head width (a DeltaNet
// model's attention layers only, in kvSlot order).
func (m *Model) kvSpec(maxLen int) backend.KVSpec {
	if m.Recurrent() {
		// A range of DeltaNet layers alone has one cache layer, never written.
		return backend.KVSpec{FirstLayer: m.Layers.Start, Layers: max(m.attentionLayers(), 1),
			KVHeads: m.kvHeads, HeadDim: m.headDim, MaxLen: maxLen}
	}
	r := m.cacheLayers()
	spec := backend.KVSpec{FirstLayer: r.Start, Layers: r.Len(), KVHeads: m.kvHeads, HeadDim: m.headDim, MaxLen: maxLen}
	if m.headDims != nil {
		spec.HeadDims = m.headDims[r.Start:r.End]
	}
	return spec
}

// cacheLayers are the loaded layers with a KV cache of their own: all of
// them but Gemma 4's KV-shared layers, which are the last ones and read
// earlier layers' caches.
func (m *Model) cacheLayers() Range {
	r := m.Layers
	if m.kvFrom == nil {
		return r
	}
	for r.End > r.Start && m.kvFrom[r.End-1] != r.End-1 {
		r.End--
	}
	return r
}

// HeadDim is the width of one attention head.
func (m *Model) HeadDim() int { return m.headDim }

// Close releases the backend's copies of the weights, then the weight
// files.
func (m *Model) Close() error {
	if m.src == nil {
		return nil
	}
	m.release()
	err := m.src.close()
	m.src = nil
	return err
}
