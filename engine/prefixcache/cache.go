package prefixcache

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"fusion/internal/atomicfile"
)

// Defaults of Config.
const (
	DefaultBlockSize  = 64
	DefaultDiskBytes  = 10 << 30 // 10 GiB
	DefaultWriteQueue = 64       // blocks waiting for the SSD writer
	// DefaultHotFraction of the machine's RAM is the hot tier's cap when
	// the caller asks for the default.
	DefaultHotFraction = 0.10
)

// Config configures a Cache. Caps are explicit: a zero cap disables the
// tier (callers pick defaults, see DefaultHotBytes and DefaultDiskBytes).
type Config struct {
	// BlockSize is the number of tokens per block (default 64).
	BlockSize int
	// HotBytes caps the RAM tier; 0 disables it.
	HotBytes int64
	// Dir is the SSD tier's directory (created if missing); "" disables
	// the tier.
	Dir string
	// DiskBytes caps the SSD tier (file sizes, headers included); 0
	// disables it.
	DiskBytes int64
	// WriteQueue is how many blocks may wait for the SSD writer (default
	// 64); a block that finds the queue full is dropped and counted.
	WriteQueue int
	Logger     *slog.Logger
}

// DefaultHotBytes is DefaultHotFraction of the machine's RAM (1 GiB when
// the RAM size is unknown).
func DefaultHotBytes() int64 {
	if m := TotalMemory(); m > 0 {
		return int64(float64(m) * DefaultHotFraction)
	}
	return 1 << 30
}

// Tier says where a block was found.
type Tier int

const (
	Miss Tier = iota
	Hot       // RAM
	Disk      // SSD, now promoted to RAM
)

// Stats are the cache's counters and sizes.
type Stats struct {
	BlockSize  int   `json:"block_size"`
	HotBlocks  int   `json:"hot_blocks"`
	HotBytes   int64 `json:"hot_bytes"`
	HotCap     int64 `json:"hot_cap_bytes"`
	DiskBlocks int   `json:"disk_blocks"`
	DiskBytes  int64 `json:"disk_bytes"`
	DiskCap    int64 `json:"disk_cap_bytes"`

	HotHits     int64 `json:"hot_hits"`      // blocks served from RAM
	DiskHits    int64 `json:"disk_hits"`     // blocks served from the SSD (and promoted)
	Misses      int64 `json:"misses"`        // lookups that found nothing
	Stored      int64 `json:"stored"`        // new blocks put in the cache
	DiskWrites  int64 `json:"disk_writes"`   // block files written
	Dropped     int64 `json:"write_dropped"` // blocks not written: queue full
	WriteErrors int64 `json:"write_errors"`  // block files that failed to write
	Corrupt     int64 `json:"corrupt"`       // bad block files found and removed
	HotEvicted  int64 `json:"hot_evicted"`
	DiskEvicted int64 `json:"disk_evicted"`
}

type hotEntry struct {
	key  Key
	data []byte
}

type diskEntry struct {
	key  Key
	size int64
	// verified: the file was written or read whole (checksum good) by
	// this process; files found at Open are checked on first use.
	verified bool
}

type writeJob struct {
	key, model Key
	tokens     int
	data       []byte
	gen        uint64 // the disk generation the job was queued in
	// verify: the block has a file; check it and rewrite it only if bad.
	verify bool
}

// Cache is the two-tier prefix cache. It is safe for concurrent use.
type Cache struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	hot      map[Key]*list.Element // of *hotEntry; front = most recent
	hotLRU   *list.List
	hotBytes int64
	disk     map[Key]*list.Element // of *diskEntry
	diskLRU  *list.List
	diskSize int64
	pending  map[Key]bool // queued for the writer
	diskGen  uint64       // bumped by ClearDisk: older queued jobs are dropped
	stats    Stats
	closed   bool

	queue chan writeJob
	done  chan struct{} // closed when the writer has stopped
}

// Open makes a cache; with an SSD tier it creates the directory, indexes
// the block files already there (removing bad ones) and starts the writer,
// which Close stops.
func Open(cfg Config) (*Cache, error) {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.WriteQueue <= 0 {
		cfg.WriteQueue = DefaultWriteQueue
	}
	if cfg.HotBytes < 0 {
		cfg.HotBytes = 0
	}
	if cfg.DiskBytes <= 0 || cfg.Dir == "" {
		cfg.DiskBytes, cfg.Dir = 0, ""
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{
		cfg: cfg, log: cfg.Logger,
		hot: map[Key]*list.Element{}, hotLRU: list.New(),
		disk: map[Key]*list.Element{}, diskLRU: list.New(),
		pending: map[Key]bool{},
		done:    make(chan struct{}),
	}
	if cfg.Dir == "" {
		close(c.done)
		return c, nil
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("prefixcache: %w", err)
	}
	if err := c.index(); err != nil {
		return nil, fmt.Errorf("prefixcache: index %s: %w", cfg.Dir, err)
	}
	c.queue = make(chan writeJob, cfg.WriteQueue)
	go c.writer()
	return c, nil
}

// BlockSize is the number of tokens per block.
func (c *Cache) BlockSize() int { return c.cfg.BlockSize }

// HasDisk reports whether the SSD tier is on.
func (c *Cache) HasDisk() bool { return c.cfg.Dir != "" }

// index rebuilds the SSD index from the directory: every block file whose
// header checks out, oldest modification first in the LRU order; bad
// files and leftover temporary files are removed.
func (c *Cache) index() error {
	type found struct {
		key   Key
		size  int64
		mtime time.Time
	}
	var files []found
	err := filepath.WalkDir(c.cfg.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp") {
			os.Remove(path) // a write cut short by a crash
			return nil
		}
		key, ok := keyOfPath(path)
		if !ok {
			return nil // not ours
		}
		_, size, err := statBlock(path, key)
		if err != nil {
			c.log.Warn("prefix cache: removing a bad block file", "path", path, "err", err)
			c.stats.Corrupt++
			os.Remove(path)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, found{key, size, info.ModTime()})
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	for _, f := range files {
		c.disk[f.key] = c.diskLRU.PushFront(&diskEntry{key: f.key, size: f.size})
		c.diskSize += f.size
	}
	c.evictDisk()
	c.log.Info("prefix cache: SSD tier indexed", "dir", c.cfg.Dir, "blocks", len(c.disk), "bytes", c.diskSize, "removed_bad", c.stats.Corrupt)
	return nil
}

// Get returns the data of the block key (the caller must not modify it),
// from RAM or else from the SSD (then promoted to RAM). A bad block file
// is removed, counted and reported as a miss.
func (c *Cache) Get(key Key) ([]byte, Tier) {
	c.mu.Lock()
	if el, ok := c.hot[key]; ok {
		c.hotLRU.MoveToFront(el)
		c.stats.HotHits++
		data := el.Value.(*hotEntry).data
		c.mu.Unlock()
		return data, Hot
	}
	_, onDisk := c.disk[key]
	if !onDisk {
		c.stats.Misses++
		c.mu.Unlock()
		return nil, Miss
	}
	c.mu.Unlock()

	path := blockPath(c.cfg.Dir, key)
	_, data, err := readBlock(path, key)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			c.log.Warn("prefix cache: removing a bad block file", "path", path, "err", err)
			c.stats.Corrupt++
			os.Remove(path)
		}
		c.dropDisk(key)
		c.stats.Misses++
		return nil, Miss
	}
	if el, ok := c.disk[key]; ok {
		c.diskLRU.MoveToFront(el)
		el.Value.(*diskEntry).verified = true
		now := time.Now()
		os.Chtimes(path, now, now) // the LRU order survives restarts
	}
	c.stats.DiskHits++
	c.putHot(key, data)
	return data, Disk
}

// Contains reports where the block key is, without touching the LRU order.
func (c *Cache) Contains(key Key) Tier {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.hot[key]; ok {
		return Hot
	}
	if _, ok := c.disk[key]; ok {
		return Disk
	}
	return Miss
}

// Put stores the block key of model (tokens tokens; the cache keeps data,
// which the caller must not modify afterwards) in RAM and queues it for the
// SSD. It reports whether the block was new to the cache.
func (c *Cache) Put(model, key Key, tokens int, data []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, inHot := c.hot[key]
	_, inDisk := c.disk[key]
	isNew := !inHot && !inDisk && !c.pending[key]
	if inHot {
		c.hotLRU.MoveToFront(c.hot[key])
	} else {
		c.putHot(key, data)
	}
	if isNew {
		c.stats.Stored++
	}
	// A block with a file nobody has read yet (found at Open) is checked
	// behind the request and rewritten if bad: a request computed it
	// because its chain broke before it, perhaps on a bad file, and this
	// one may be bad too.
	verify := inDisk && !c.disk[key].Value.(*diskEntry).verified
	if c.cfg.Dir == "" || inDisk && !verify || c.pending[key] || c.closed {
		return isNew
	}
	if int64(len(data))+headerSize > c.cfg.DiskBytes {
		return isNew
	}
	select {
	case c.queue <- writeJob{key: key, model: model, tokens: tokens, data: data, gen: c.diskGen, verify: verify}:
		c.pending[key] = true
	default:
		c.stats.Dropped++
	}
	return isNew
}

// putHot inserts into the RAM tier and evicts past its cap. c.mu is held.
func (c *Cache) putHot(key Key, data []byte) {
	size := int64(len(data))
	if size > c.cfg.HotBytes {
		return
	}
	if el, ok := c.hot[key]; ok {
		c.hotLRU.MoveToFront(el)
		return
	}
	c.hot[key] = c.hotLRU.PushFront(&hotEntry{key: key, data: data})
	c.hotBytes += size
	for c.hotBytes > c.cfg.HotBytes {
		el := c.hotLRU.Back()
		e := el.Value.(*hotEntry)
		c.hotLRU.Remove(el)
		delete(c.hot, e.key)
		c.hotBytes -= int64(len(e.data))
		c.stats.HotEvicted++
	}
}

// dropDisk forgets key's file in the index. c.mu is held.
func (c *Cache) dropDisk(key Key) {
	if el, ok := c.disk[key]; ok {
		c.diskSize -= el.Value.(*diskEntry).size
		c.diskLRU.Remove(el)
		delete(c.disk, key)
	}
}

// evictDisk removes the least recently used files past the cap. c.mu is
// held.
func (c *Cache) evictDisk() {
	for c.diskSize > c.cfg.DiskBytes && c.diskLRU.Len() > 0 {
		e := c.diskLRU.Back().Value.(*diskEntry)
		if err := os.Remove(blockPath(c.cfg.Dir, e.key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("prefix cache: evicting a block file", "err", err)
		}
		c.dropDisk(e.key)
		c.stats.DiskEvicted++
	}
}

// writer writes queued blocks until the queue is closed.
func (c *Cache) writer() {
	defer close(c.done)
	for job := range c.queue {
		c.write(job)
	}
}

func (c *Cache) write(job writeJob) {
	c.mu.Lock()
	stale := job.gen != c.diskGen
	c.mu.Unlock()
	path := blockPath(c.cfg.Dir, job.key)
	var err error
	if !stale && job.verify {
		_, _, rerr := readBlock(path, job.key)
		c.mu.Lock()
		switch {
		case rerr == nil:
			if el, ok := c.disk[job.key]; ok && job.gen == c.diskGen {
				el.Value.(*diskEntry).verified = true
			}
			delete(c.pending, job.key)
			c.mu.Unlock()
			return
		case errors.Is(rerr, ErrCorrupt):
			c.log.Warn("prefix cache: replacing a bad block file", "path", path, "err", rerr)
			c.stats.Corrupt++
		}
		c.mu.Unlock()
	}
	if !stale {
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			h := header{tokens: uint32(job.tokens), key: job.key, model: job.model, dataLen: uint64(len(job.data)), dataCRC: crc32c(job.data)}
			err = atomicfile.Write(path, func(w io.Writer) error { return writeBlock(w, h, job.data) })
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, job.key)
	switch {
	case stale:
	case err != nil:
		c.stats.WriteErrors++
		c.log.Warn("prefix cache: writing a block file", "path", path, "err", err)
	case job.gen != c.diskGen:
		os.Remove(path) // cleared while it was being written
	default:
		c.dropDisk(job.key)
		c.disk[job.key] = c.diskLRU.PushFront(&diskEntry{key: job.key, size: headerSize + int64(len(job.data)), verified: true})
		c.diskSize += headerSize + int64(len(job.data))
		c.stats.DiskWrites++
		c.evictDisk()
	}
}

// Remove drops the block key from both tiers (its file too): a caller
// found its data unusable.
func (c *Cache) Remove(key Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.hot[key]; ok {
		c.hotBytes -= int64(len(el.Value.(*hotEntry).data))
		c.hotLRU.Remove(el)
		delete(c.hot, key)
	}
	if _, ok := c.disk[key]; ok {
		if err := os.Remove(blockPath(c.cfg.Dir, key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("prefix cache: removing a block file", "err", err)
		}
		c.dropDisk(key)
	}
}

// Cleared is what a clear removed.
type Cleared struct {
	Blocks int   `json:"blocks"`
	Bytes  int64 `json:"bytes"`
}

// ClearHot empties the RAM tier.
func (c *Cache) ClearHot() Cleared {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Cleared{Blocks: len(c.hot), Bytes: c.hotBytes}
	clear(c.hot)
	c.hotLRU.Init()
	c.hotBytes = 0
	return out
}

// ClearDisk removes every block file of the SSD tier; blocks still queued
// are dropped.
func (c *Cache) ClearDisk() (Cleared, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Cleared{Blocks: len(c.disk), Bytes: c.diskSize}
	if c.cfg.Dir == "" {
		return out, nil
	}
	c.diskGen++
	var errs []error
	for key := range c.disk {
		if err := os.Remove(blockPath(c.cfg.Dir, key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	clear(c.disk)
	c.diskLRU.Init()
	c.diskSize = 0
	return out, errors.Join(errs...)
}

// Stats returns the counters and sizes.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.BlockSize = c.cfg.BlockSize
	s.HotBlocks, s.HotBytes, s.HotCap = len(c.hot), c.hotBytes, c.cfg.HotBytes
	s.DiskBlocks, s.DiskBytes, s.DiskCap = len(c.disk), c.diskSize, c.cfg.DiskBytes
	return s
}

// Flush waits until the blocks queued so far are written (or dropped).
func (c *Cache) Flush() {
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.done:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close writes the blocks still queued and stops the writer. The cache
// still answers Get afterwards but stores nothing on the SSD.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed = true
	if c.queue != nil {
		close(c.queue)
	}
	c.mu.Unlock()
	<-c.done
	return nil
}

// Probe is how a prompt maps onto the cache (POST /admin/api/cache/probe).
type Probe struct {
	ModelLoaded bool
	TotalTokens int
	BlockSize   int
	// TotalBlocks counts the prompt's blocks, a partial last one included
	// (it is never cached).
	TotalBlocks int
	// HotBlocks and DiskBlocks are the leading blocks a request would
	// restore from RAM and from the SSD; the blocks after the first miss
	// are cold whatever the cache holds.
	HotBlocks, DiskBlocks, ColdBlocks int
	// HitTokens are the tokens of the cached blocks, ColdTokens the rest.
	HitTokens, ColdTokens int
}
