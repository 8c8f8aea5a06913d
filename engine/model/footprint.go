package model

import (
	"fmt"
	"os"
	"strings"

	"fusion/engine/gguf"
	"fusion/engine/modelfile"
	"fusion/engine/safetensors"
)

// Footprint reads the configuration and the tensor table of the model at
// path (a model directory or a .gguf file; the files mapped, no weight
// read) and files its tensors' bytes by layer (modelfile.Footprint): what
// a pipeline stage of a layer range holds and reads per token.
func Footprint(path string) (*modelfile.Config, modelfile.Footprint, error) {
	sizes := map[string]int64{}
	var cfg *modelfile.Config
	if st, err := os.Stat(path); err == nil && !st.IsDir() || strings.HasSuffix(path, ".gguf") {
		f, err := gguf.Open(path, gguf.LoadMmap)
		if err != nil {
			return nil, modelfile.Footprint{}, fmt.Errorf("model: %w", err)
		}
		defer f.Close()
		if cfg, err = ggufConfig(f); err != nil {
			return nil, modelfile.Footprint{}, fmt.Errorf("model: %w", err)
		}
		for _, t := range f.Tensors {
			sizes[t.Name] += int64(len(t.Data))
		}
		return cfg, cfg.Footprint(sizes), nil
	}
	cfg, err := modelfile.LoadConfig(path)
	if err != nil {
		return nil, modelfile.Footprint{}, fmt.Errorf("model: %w", err)
	}
	w, err := modelfile.OpenWeights(path, safetensors.LoadMmap)
	if err != nil {
		return nil, modelfile.Footprint{}, fmt.Errorf("model: %w", err)
	}
	for _, name := range w.Names() {
		if t, ok := w.Tensor(name); ok {
			sizes[name] += int64(len(t.Data))
		}
	}
	if err := w.Close(); err != nil {
		return nil, modelfile.Footprint{}, fmt.Errorf("model: %s: %w", path, err)
	}
	return cfg, cfg.Footprint(sizes), nil
}
