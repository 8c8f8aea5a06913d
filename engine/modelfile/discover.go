package modelfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kind is the on-disk format of a discovered model.
type Kind string

// Model kinds.
const (
	KindSafetensors Kind = "safetensors" // a directory with config.json (or a diffusers model_index.json)
	KindGGUF        Kind = "gguf"        // a single .gguf file
	// KindONNX: a directory without config.json holding one *.onnx and
	// its *.onnx.json (a Piper voice), or one silero_vad*.onnx (a Silero
	// voice activity detector).
	KindONNX Kind = "onnx"
	// KindRNNoise: a directory without config.json holding an RNNoise
	// weight blob, RNNoiseFile (a speech denoiser).
	KindRNNoise Kind = "rnnoise"
)

// RNNoiseFile is the weight blob of an RNNoise model directory.
const RNNoiseFile = "rnnoise.bin"

// DiffusersIndexFile marks a diffusers pipeline folder (one subfolder per
// component): an image model.
const DiffusersIndexFile = "model_index.json"

// Entry is a model found in a models directory.
type Entry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
}

// Discover lists the models in modelsDir: every subdirectory holding a
// config.json or a diffusers model_index.json (named after the directory) and every *.gguf file (named
// after the file without its extension). Hidden entries are skipped;
// symbolic links are followed. The list is sorted by name, then kind. It
// reads no weights.
func Discover(modelsDir string) ([]Entry, error) {
	des, err := os.ReadDir(modelsDir)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	var out []Entry
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(modelsDir, name)
		st, err := os.Stat(path) // follows links
		if err != nil {
			continue // dangling link
		}
		switch {
		case st.IsDir():
			switch {
			case regularFile(filepath.Join(path, ConfigFile)), regularFile(filepath.Join(path, DiffusersIndexFile)):
				out = append(out, Entry{Name: name, Path: path, Kind: KindSafetensors})
			case isONNXDir(path):
				out = append(out, Entry{Name: name, Path: path, Kind: KindONNX})
			case regularFile(filepath.Join(path, RNNoiseFile)):
				out = append(out, Entry{Name: name, Path: path, Kind: KindRNNoise})
			}
		case st.Mode().IsRegular() && strings.EqualFold(filepath.Ext(name), ".gguf"):
			out = append(out, Entry{Name: strings.TrimSuffix(name, filepath.Ext(name)), Path: path, Kind: KindGGUF})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Kind < out[j].Kind
	})
	return out, nil
}

// isONNXDir reports whether dir holds exactly one *.onnx with its
// *.onnx.json beside it, or one silero_vad*.onnx.
func isONNXDir(dir string) bool {
	models, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if len(models) != 1 {
		return false
	}
	if strings.HasPrefix(filepath.Base(models[0]), "silero_vad") {
		return true
	}
	st, err := os.Stat(models[0] + ".json")
	return err == nil && st.Mode().IsRegular()
}

// regularFile reports whether path is a regular file (links followed).
func regularFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
