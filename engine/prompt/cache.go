package prompt

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"fusion/engine/tokenizer"
)

// DefaultCacheModels is how many models' text sides a Cache keeps when
// its size is not set. A Qwen3-sized tokenizer (151k tokens) holds about
// 22 MB once parsed.
const DefaultCacheModels = 8

// CacheStats are a Cache's figures since it was made.
type CacheStats struct {
	Entries       int   // models held (parsed or being parsed)
	Hits          int64 // lookups answered by a parsed entry
	Shared        int64 // lookups that waited for another caller's parse
	Parses        int64 // loads from the files (misses, and reloads after a change)
	Invalidations int64 // entries dropped because their files changed
	Evictions     int64 // entries dropped for the size bound
}

// Cache keeps the text side (tokenizer, chat template and the special
// tokens of generation_config.json and the other config files) of the
// recently used models, so that counting tokens for a model costs the
// encoding and not the parsing of its tokenizer.json (about half a second
// for Qwen3's). It is safe for concurrent use and bounded: it holds at
// most its size in models, dropping the least recently used first.
//
// An entry is keyed by the model's path and checked on every lookup
// against the size and modification time of the files Load reads (see
// Fingerprint): a change loads the model's text side again. Concurrent
// lookups of a model that is not held parse it once; the others wait for
// that parse. A failed load is not kept (the next lookup tries again).
// Builders are immutable, so callers share them.
type Cache struct {
	size int
	load func(path string) (*Builder, error) // Load; tests wrap it

	mu     sync.Mutex
	order  *list.List // of *cacheEntry, most recently used first
	byPath map[string]*list.Element
	stats  CacheStats // but Entries
}

type cacheEntry struct {
	path, fingerprint string
	done              chan struct{} // closed when b and err are set
	b                 *Builder
	err               error
}

// NewCache returns a cache of at most size models (DefaultCacheModels
// when size ≤ 0).
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheModels
	}
	return &Cache{size: size, load: Load, order: list.New(), byPath: map[string]*list.Element{}}
}

// Get returns the Builder of the model at path (a directory or a .gguf
// file, as Load takes), loading it when the cache does not hold it or
// its files changed since. ctx bounds only the wait for another caller's
// load: a load, once started, runs to its end for everyone waiting.
func (c *Cache) Get(ctx context.Context, path string) (*Builder, error) {
	fp, err := Fingerprint(path)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if el, ok := c.byPath[path]; ok {
		e := el.Value.(*cacheEntry)
		if e.fingerprint == fp {
			c.order.MoveToFront(el)
			select {
			case <-e.done:
				c.stats.Hits++
			default:
				c.stats.Shared++
			}
			c.mu.Unlock()
			select {
			case <-e.done:
				return e.b, e.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		c.remove(el)
		c.stats.Invalidations++
	}
	e := &cacheEntry{path: path, fingerprint: fp, done: make(chan struct{})}
	c.byPath[path] = c.order.PushFront(e)
	for c.order.Len() > c.size {
		c.remove(c.order.Back())
		c.stats.Evictions++
	}
	c.stats.Parses++
	c.mu.Unlock()

	e.b, e.err = c.load(path)
	if e.err != nil {
		c.mu.Lock()
		if el, ok := c.byPath[path]; ok && el.Value == e {
			c.remove(el)
		}
		c.mu.Unlock()
	}
	close(e.done)
	return e.b, e.err
}

// remove drops an entry; called with c.mu held. Callers waiting on it
// still get its result.
func (c *Cache) remove(el *list.Element) {
	c.order.Remove(el)
	delete(c.byPath, el.Value.(*cacheEntry).path)
}

// Stats returns the cache's figures.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = c.order.Len()
	return s
}

// Fingerprint identifies the state of the files Load reads for the model
// at path: each one's size and modification time, or its absence. Two
// equal fingerprints mean Load would read the same files (unless one was
// rewritten with the same size within the file system's timestamp
// resolution).
func Fingerprint(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if !st.IsDir() {
		writeStat(&b, filepath.Base(path), st)
		return b.String(), nil
	}
	for _, name := range tokenizer.SourceFiles() {
		if err := statInto(&b, path, name); err != nil {
			return "", err
		}
	}
	extra := filepath.Join(path, tokenizer.AdditionalTemplatesDir)
	entries, err := os.ReadDir(extra)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	for _, de := range entries {
		if strings.HasSuffix(de.Name(), ".jinja") && !de.IsDir() {
			if err := statInto(&b, extra, de.Name()); err != nil {
				return "", err
			}
		}
	}
	return b.String(), nil
}

func statInto(b *strings.Builder, dir, name string) error {
	st, err := os.Stat(filepath.Join(dir, name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		b.WriteString(name + "=absent;")
	case err != nil:
		return fmt.Errorf("prompt: %w", err)
	default:
		writeStat(b, name, st)
	}
	return nil
}

func writeStat(b *strings.Builder, name string, st fs.FileInfo) {
	b.WriteString(name)
	b.WriteByte('=')
	b.WriteString(strconv.FormatInt(st.Size(), 10))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(st.ModTime().UnixNano(), 10))
	b.WriteByte(';')
}
