package runner

import (
	"os"
	"sync"
	"time"

	"fusion/engine/model"
	"fusion/engine/modelfile"
)

// ggufInfoCache keeps what model.InspectGGUF said of each GGUF file of
// the models dir, keyed by path, size and modification time, so that
// listing the models (Details) reads a file's header once, not on every
// listing; a file that changes (another size or time) is read again. An
// answer that the file cannot be loaded is kept too (it is the file's, and
// stays true until the file changes). It holds at most one entry per
// GGUF file the models dir holds now: a listing drops the files it no
// longer names and those it finds gone.
type ggufInfoCache struct {
	// inspect is model.InspectGGUF (a seam for the tests).
	inspect func(path string) (*modelfile.Config, error)

	mu      sync.Mutex
	entries map[string]ggufInfo // by path
}

// ggufInfo is one file's inspection and the version of the file it is of.
type ggufInfo struct {
	size  int64
	mtime time.Time
	cfg   *modelfile.Config // read only: shared by every listing
	err   error
}

func newGGUFInfoCache() *ggufInfoCache {
	return &ggufInfoCache{inspect: model.InspectGGUF, entries: map[string]ggufInfo{}}
}

// get returns InspectGGUF's answer for path, from the cache when the
// file's size and modification time are those it was read at.
func (c *ggufInfoCache) get(path string) (*modelfile.Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		c.mu.Lock()
		delete(c.entries, path) // gone: nothing to keep for it
		c.mu.Unlock()
		return c.inspect(path) // it says why, naming the file
	}
	c.mu.Lock()
	e, ok := c.entries[path]
	c.mu.Unlock()
	if ok && e.size == fi.Size() && e.mtime.Equal(fi.ModTime()) {
		return e.cfg, e.err
	}
	cfg, err := c.inspect(path) // outside the lock: a header read is I/O
	c.mu.Lock()
	c.entries[path] = ggufInfo{size: fi.Size(), mtime: fi.ModTime(), cfg: cfg, err: err}
	c.mu.Unlock()
	return cfg, err
}

// keep drops the entries of every path not in paths (the files the
// models dir holds now).
func (c *ggufInfoCache) keep(paths map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.entries {
		if !paths[p] {
			delete(c.entries, p)
		}
	}
}

// len is the number of files held.
func (c *ggufInfoCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
