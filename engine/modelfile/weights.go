package modelfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"fusion/engine/safetensors"
	"fusion/engine/tensor"
)

// Weight file names.
const (
	SingleWeightsFile = "model.safetensors"
	IndexFile         = "model.safetensors.index.json"
)

// Weights is the set of safetensors files of a model, opened with one load
// mode, and the tensors they hold by name.
type Weights struct {
	files []*safetensors.File
	owner map[string]int // tensor name -> index in files
	names []string       // sorted
	bytes int64
}

// OpenWeights opens the weights of dir: the shards listed by
// model.safetensors.index.json if present, else model.safetensors, else
// every model*.safetensors (the mlx-lm glob). Every shard the index names
// must exist and hold the tensors it claims; no tensor may appear in two
// files.
func OpenWeights(dir string, mode safetensors.LoadMode) (*Weights, error) {
	indexPath := filepath.Join(dir, IndexFile)
	data, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		return openIndexed(dir, indexPath, data, mode)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	single := filepath.Join(dir, SingleWeightsFile)
	if _, err := os.Stat(single); err == nil {
		return openFiles([]string{single}, mode)
	}
	matches, err := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("modelfile: %s: %w: neither %s, %s nor model*.safetensors", dir, ErrNoWeights, IndexFile, SingleWeightsFile)
	}
	sort.Strings(matches)
	return openFiles(matches, mode)
}

type weightIndex struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

func openIndexed(dir, indexPath string, data []byte, mode safetensors.LoadMode) (*Weights, error) {
	var idx weightIndex
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("modelfile: %s: %w: %v", indexPath, ErrInvalidIndex, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("modelfile: %s: %w: empty weight_map", indexPath, ErrInvalidIndex)
	}
	byFile := make(map[string][]string)
	for name, file := range idx.WeightMap {
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, `/\`) {
			return nil, fmt.Errorf("modelfile: %s: %w: tensor %q maps to %q, not a file name in the model directory", indexPath, ErrInvalidIndex, name, file)
		}
		byFile[file] = append(byFile[file], name)
	}
	files := make([]string, 0, len(byFile))
	for f := range byFile {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("modelfile: %s: %w: %s (listed for %d tensors)", indexPath, ErrMissingShard, f, len(byFile[f]))
		}
	}
	w := &Weights{owner: make(map[string]int, len(idx.WeightMap))}
	for i, name := range files {
		sf, err := safetensors.Open(filepath.Join(dir, name), mode)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("modelfile: %w", err)
		}
		w.files = append(w.files, sf)
		claimed := byFile[name]
		sort.Strings(claimed)
		for _, tn := range claimed {
			t, ok := sf.Tensor(tn)
			if !ok {
				w.Close()
				return nil, fmt.Errorf("modelfile: %s: %w: %q is listed in %s but the file does not hold it", indexPath, ErrMissingTensor, tn, name)
			}
			w.owner[tn] = i
			w.bytes += int64(len(t.Data))
		}
	}
	w.sortNames()
	return w, nil
}

// openFiles opens unindexed weight files; every tensor they hold counts.
func openFiles(paths []string, mode safetensors.LoadMode) (*Weights, error) {
	w := &Weights{owner: make(map[string]int)}
	for i, p := range paths {
		sf, err := safetensors.Open(p, mode)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("modelfile: %w", err)
		}
		w.files = append(w.files, sf)
		for _, t := range sf.Tensors() {
			if j, dup := w.owner[t.Name]; dup {
				err := fmt.Errorf("modelfile: %w: %q is in both %s and %s", ErrDuplicateTensor, t.Name, w.files[j].Name(), p)
				return nil, errors.Join(err, w.Close())
			}
			w.owner[t.Name] = i
			w.bytes += int64(len(t.Data))
		}
	}
	w.sortNames()
	return w, nil
}

func (w *Weights) sortNames() {
	w.names = make([]string, 0, len(w.owner))
	for n := range w.owner {
		w.names = append(w.names, n)
	}
	sort.Strings(w.names)
}

// Tensor returns the named tensor.
func (w *Weights) Tensor(name string) (tensor.Tensor, bool) {
	i, ok := w.owner[name]
	if !ok {
		return tensor.Tensor{}, false
	}
	return w.files[i].Tensor(name)
}

// Has reports whether the named tensor exists.
func (w *Weights) Has(name string) bool {
	_, ok := w.owner[name]
	return ok
}

// Names returns every tensor name, sorted.
func (w *Weights) Names() []string { return append([]string(nil), w.names...) }

// Len is the number of tensors.
func (w *Weights) Len() int { return len(w.names) }

// Bytes is the exact number of bytes of tensor data.
func (w *Weights) Bytes() int64 { return w.bytes }

// Files returns the paths of the weight files, in load order.
func (w *Weights) Files() []string {
	out := make([]string, len(w.files))
	for i, f := range w.files {
		out[i] = f.Name()
	}
	return out
}

// Mode is the load mode the files were opened with.
func (w *Weights) Mode() safetensors.LoadMode {
	if len(w.files) == 0 {
		return safetensors.LoadDefault
	}
	return w.files[0].Mode()
}

// Close closes every file; tensors must not be used afterwards.
func (w *Weights) Close() error {
	var errs []error
	for _, f := range w.files {
		errs = append(errs, f.Close())
	}
	w.files, w.owner, w.names = nil, nil, nil
	return errors.Join(errs...)
}
