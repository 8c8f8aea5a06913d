package modelfile

import (
	"errors"
	"fmt"

	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// Options control Open.
type Options struct {
	// LoadMode is how weight files get into memory (LoadDefault means
	// safetensors.DefaultLoadMode). Every shard uses the same mode.
	LoadMode safetensors.LoadMode
	// ConfigOnly skips the weights: Model.Weights stays nil.
	ConfigOnly bool
}

// Model is an opened model directory.
type Model struct {
	Dir        string
	Config     *Config
	Generation *GenerationConfig // nil when generation_config.json is absent
	Weights    *Weights          // nil with Options.ConfigOnly
}

// Open reads dir's configuration and, unless opts.ConfigOnly, its weights,
// checking that the weights fit the config: the embedding is
// [vocab_size, hidden_size] and an untied model has its lm_head.
func Open(dir string, opts Options) (*Model, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	gen, err := LoadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Dir: dir, Config: cfg, Generation: gen}
	if opts.ConfigOnly {
		return m, nil
	}
	if m.Weights, err = OpenWeights(dir, opts.LoadMode); err != nil {
		return nil, err
	}
	if err := m.checkWeights(); err != nil {
		return nil, errors.Join(fmt.Errorf("modelfile: %s: %w", dir, err), m.Weights.Close())
	}
	return m, nil
}

func (m *Model) checkWeights() error {
	c := m.Config
	emb, err := m.Linear("model.embed_tokens")
	if err != nil {
		return err
	}
	if emb.Out != c.VocabSize || emb.In != c.HiddenSize {
		return fmt.Errorf("%w: model.embed_tokens is [%d, %d], config says [vocab_size %d, hidden_size %d]",
			ErrBadLinear, emb.Out, emb.In, c.VocabSize, c.HiddenSize)
	}
	if !c.TieWordEmbeddings && !m.Has("lm_head.weight") {
		return fmt.Errorf("%w: lm_head.weight (tie_word_embeddings is false)", ErrMissingTensor)
	}
	return nil
}

// Linear returns the module at path with its effective quantization; see
// LookupLinear.
func (m *Model) Linear(path string) (*Linear, error) {
	if m.Weights == nil {
		return nil, fmt.Errorf("modelfile: %s: weights not loaded", m.Dir)
	}
	return LookupLinear(m.Weights, m.Config.Quantization, m.Config.WeightPrefix+path)
}

// Experts returns the experts of the stacked module at path; see
// LookupExperts.
func (m *Model) Experts(path string) ([]*Linear, error) {
	if m.Weights == nil {
		return nil, fmt.Errorf("modelfile: %s: weights not loaded", m.Dir)
	}
	return LookupExperts(m.Weights, m.Config.Quantization, m.Config.WeightPrefix+path)
}

// Tensor returns the tensor of that name, under the config's
// WeightPrefix.
func (m *Model) Tensor(name string) (tensor.Tensor, bool) {
	if m.Weights == nil {
		return tensor.Tensor{}, false
	}
	return m.Weights.Tensor(m.Config.WeightPrefix + name)
}

// Has reports whether the tensor of that name exists, under the config's
// WeightPrefix.
func (m *Model) Has(name string) bool {
	_, ok := m.Tensor(name)
	return ok
}

// EOSTokenIDs returns the end-of-sequence ids of config.json followed by
// those generation_config.json adds.
func (m *Model) EOSTokenIDs() []int {
	var gen []int
	if m.Generation != nil {
		gen = m.Generation.EOSTokenIDs
	}
	return union(m.Config.EOSTokenIDs, gen)
}

// Close releases the weights.
func (m *Model) Close() error {
	if m.Weights == nil {
		return nil
	}
	return m.Weights.Close()
}
