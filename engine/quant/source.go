package quant

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"fusion/engine/modelfile"
)

// SourceKey is the config.json key under which an oQ output records the
// float model it was made from (mlx-lm and transformers ignore keys they
// do not know).
const SourceKey = "oq_source"

// maxHeaderBytes bounds a safetensors header SourceHash reads, and what
// it reads of a file source.
const maxHeaderBytes = 100 << 20

// Source names the float model a quantized one was made from: its name
// (the directory's, as the models directory lists it) and SourceHash of
// it, so that a model of that name is known to be the same one.
type Source struct {
	Model  string `json:"model"`
	SHA256 string `json:"sha256"`
}

// SourceHash identifies a float model directory without reading its
// weights: the SHA-256 of its config.json, its weights index when it has
// one, and the name and header (tensor names, dtypes, shapes, offsets) of
// each safetensors file, in name order.
//
// A file (a GGUF source) is identified by its name, size and first
// maxHeaderBytes bytes (its metadata and tensor list, normally).
func SourceHash(dir string) (string, error) {
	h := sha256.New()
	if st, err := os.Stat(dir); err == nil && st.Mode().IsRegular() {
		f, err := os.Open(dir)
		if err != nil {
			return "", fmt.Errorf("quant: %w", err)
		}
		defer f.Close()
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(dir), st.Size())
		if _, err := io.Copy(h, io.LimitReader(f, maxHeaderBytes)); err != nil {
			return "", fmt.Errorf("quant: %w", err)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	for _, name := range []string{modelfile.ConfigFile, modelfile.IndexFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) && name == modelfile.IndexFile {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("quant: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("quant: %w", err)
	}
	var files []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") && !strings.HasPrefix(e.Name(), ".") {
			files = append(files, e.Name())
		}
	}
	slices.Sort(files)
	for _, name := range files {
		head, err := safetensorsHeader(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(head))
		h.Write(head)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// safetensorsHeader is the JSON header of a safetensors file.
func safetensorsHeader(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, fmt.Errorf("quant: %s: %w", filepath.Base(path), err)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > maxHeaderBytes {
		return nil, fmt.Errorf("quant: %s: a header of %d bytes", filepath.Base(path), size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("quant: %s: %w", filepath.Base(path), err)
	}
	return b, nil
}

// RecordedSource is the source an oQ output in dir records (false when
// its config.json has none: not made by oQ, before oQ recorded it, or a
// GGUF file, which records none yet).
func RecordedSource(dir string) (Source, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, modelfile.ConfigFile))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return Source{}, false, nil
	}
	if err != nil {
		return Source{}, false, fmt.Errorf("quant: %w", err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return Source{}, false, fmt.Errorf("quant: config.json: %w", err)
	}
	raw, ok := cfg[SourceKey]
	if !ok {
		return Source{}, false, nil
	}
	var s Source
	if err := json.Unmarshal(raw, &s); err != nil || s.Model == "" || s.SHA256 == "" {
		return Source{}, false, fmt.Errorf("quant: config.json: %s is not {model, sha256}: %s", SourceKey, raw)
	}
	return s, true, nil
}

// Matches reports whether the float model in dir is the recorded source
// (its SourceHash unchanged).
func (s Source) Matches(dir string) bool {
	h, err := SourceHash(dir)
	return err == nil && h == s.SHA256
}
