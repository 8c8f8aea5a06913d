package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"fusion/engine/prefixcache"
	"fusion/engine/prompt"
)

// This file attaches the prefix cache (engine/prefixcache) to generation:
// restorePrefix before prefill, storePrefix after it and at the end. A
// scheduler with its own prefill calls the same two methods around it:
// restore when the sequence is made, prefill from the tokens restored,
// store once the prompt is in and when the sequence finishes.

// A model with recurrent layers (Gated DeltaNet) has a state that a
// block of KV does not hold and that cannot go back to an earlier
// position. Its blocks carry a snapshot of that state when the prefill
// ended exactly at their end (model.Sequence.ExportKV): the scheduler cuts
// its prompt chunks at every CacheStateEvery-th block boundary
// (snapshotEvery) and stores the blocks as each chunk lands, so those
// blocks have one; a restore imports the run of cached blocks and keeps
// it up to the deepest block with a snapshot.

// stateSequence is a sequence with recurrent layers: StateLen is the
// position their state is at (behind Len after importing blocks without
// a snapshot).
type stateSequence interface {
	StateLen() int
}

// snapshotEvery is, for a generation of a model with recurrent layers
// served by the prefix cache, the positions between the state snapshots
// its prefill keeps (0 otherwise).
func (g *generation) snapshotEvery() int {
	if !g.lm.recurrent || g.r.pcache == nil || g.lm.cacheKeyErr != nil {
		return 0
	}
	return g.r.pcache.BlockSize() * g.r.cfg.CacheStateEvery
}

// crossedBlock reports whether a prefill step from position before to
// after passed the end of a prefix-cache block of a recurrent model:
// its blocks are stored as they land, while the state is at their end.
func (g *generation) crossedBlock(before, after int) bool {
	e := g.snapshotEvery()
	return e > 0 && after/e > before/e
}

// Defaults of the prefix cache's Config fields.
const (
	DefaultCacheSSDBytes = prefixcache.DefaultDiskBytes
)

// kvSequence is a sequence whose KV can be exported and imported in
// blocks (see backend.KVCache.ReadKV).
type kvSequence interface {
	// Len is the number of positions the sequence holds.
	Len() int
	ExportKV(from, to int) ([]byte, error)
	ImportKV(block []byte) error
	// Truncate forgets the positions from n on.
	Truncate(n int)
}

// openPrefixCache opens the cache the config asks for (nil when both tiers
// are off).
func openPrefixCache(cfg Config) (*prefixcache.Cache, error) {
	hot := cfg.CacheHotBytes
	if hot == 0 {
		hot = prefixcache.DefaultHotBytes()
	}
	ssd := cfg.CacheSSDBytes
	if ssd == 0 {
		ssd = DefaultCacheSSDBytes
	}
	dir := cfg.CacheDir
	if ssd < 0 {
		dir = ""
	}
	if hot < 0 && dir == "" {
		return nil, nil
	}
	return prefixcache.Open(prefixcache.Config{
		HotBytes: max(hot, 0), Dir: dir, DiskBytes: max(ssd, 0), WriteQueue: cfg.CacheWriteQueue, Logger: cfg.Logger,
	})
}

// modelCacheKey is the prefix-cache identity of a model of the models
// dir as this runner loads it: the fingerprint of its files (name, size,
// modification time and the first 64 KiB of each: headers and configs),
// the backend and its KV layout, and the layers (all of them). Blocks of
// one backend are never given to another: the layouts may match, the
// numbers computed differ in their last bits.
func modelCacheKey(path, backendName, kvLayout string) (prefixcache.Key, error) {
	return modelCacheKeyOf(path, backendName, kvLayout, "layers=all")
}

// modelCacheKeyOf is modelCacheKey for some of the layers (named).
func modelCacheKeyOf(path, backendName, kvLayout, layers string) (prefixcache.Key, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return prefixcache.Key{}, err
	} else if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return prefixcache.Key{}, err
		}
		files = files[:0]
		for _, e := range entries {
			n := e.Name()
			if e.Type().IsRegular() && (strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".gguf") || strings.HasSuffix(n, ".json")) {
				files = append(files, filepath.Join(path, n))
			}
		}
		sort.Strings(files)
	}
	parts := []string{"backend=" + backendName, "kv=" + kvLayout, layers}
	for _, f := range files {
		fp, err := fileFingerprint(f)
		if err != nil {
			return prefixcache.Key{}, err
		}
		parts = append(parts, filepath.Base(f)+"="+fp)
	}
	return prefixcache.ModelKey(parts...), nil
}

func fileFingerprint(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, 64<<10); err != nil && err != io.EOF {
		return "", err
	}
	return fmt.Sprintf("%d/%d/%s", st.Size(), st.ModTime().UnixNano(), hex.EncodeToString(h.Sum(nil))), nil
}

// prefixRun is a generation's use of the prefix cache.
type prefixRun struct {
	keys     []prefixcache.Key // of the prompt's whole blocks
	restored int               // prompt tokens restored from the cache
	stored   int               // blocks of the sequence already in the cache
}

// restorePrefix imports the longest run of cached blocks of the prompt
// into seq and returns how many tokens it restored. At least the prompt's
// last token is left to compute (its logits start the generation): when
// every token was restored (a prompt of whole blocks), the last position
// is dropped again.
func (g *generation) restorePrefix(ctx context.Context, seq sequence) int {
	if ps, ok := seq.(*pipeSequence); ok {
		return g.restorePipe(ctx, ps)
	}
	c := g.r.pcache
	ks, ok := seq.(kvSequence)
	if c == nil || !ok || g.lm.cacheKeyErr != nil || ks.Len() != 0 {
		return 0
	}
	bs := c.BlockSize()
	g.pfx.keys = prefixcache.Chain(g.lm.cacheKey, g.prompt, bs)
	limit := len(g.pfx.keys)
	var st stateSequence // set for a model with recurrent layers
	if g.lm.recurrent {
		if st, _ = seq.(stateSequence); st == nil {
			return 0
		}
		// The state cannot step back from the prompt's end to compute
		// its last token: stop a block short of it.
		limit = min(limit, (len(g.prompt)-1)/bs)
	}
	n, good := 0, 0 // blocks imported, and up to the deepest usable one
	for ; n < limit && ctx.Err() == nil; n++ {
		data, tier := c.Get(g.pfx.keys[n])
		if tier == prefixcache.Miss {
			break
		}
		err := ks.ImportKV(data)
		switch {
		case err != nil:
		case st != nil:
			if st.StateLen() == (n+1)*bs {
				good = n + 1 // the block carried a snapshot
			}
		case ks.Len() != (n+1)*bs:
			err = fmt.Errorf("the block held %d positions, not %d", ks.Len()-n*bs, bs)
		default:
			good = n + 1
		}
		if err != nil {
			// A block of the wrong size for this model cannot carry its key
			// (a checksummed file is not a trusted one); recompute from here
			// rather than fail the request.
			g.r.cfg.Logger.Warn("prefix cache: block not imported", "model", g.lm.name, "block", n, "err", err)
			c.Remove(g.pfx.keys[n])
			break
		}
	}
	// Blocks after the deepest snapshot are recomputed (the state is at
	// the snapshot; their KV goes).
	restored := good * bs
	if restored == len(g.prompt) {
		restored--
	}
	if restored < ks.Len() || st != nil {
		ks.Truncate(restored)
	}
	g.pfx.restored, g.pfx.stored = restored, good
	if restored > 0 {
		g.r.cfg.Logger.Debug("prefix cache: restored", "model", g.lm.name, "tokens", restored, "prompt", len(g.prompt))
	}
	return restored
}

// storePrefix puts the whole blocks of tokens that seq holds and the cache
// lacks into it and returns how many of their tokens were new to the
// cache. tokens is the prompt after prefill, the prompt and the output at
// the end.
func (g *generation) storePrefix(seq sequence, tokens []int) int {
	if ps, ok := seq.(*pipeSequence); ok {
		return g.storePipe(ps, tokens)
	}
	c := g.r.pcache
	ks, ok := seq.(kvSequence)
	if c == nil || !ok || g.lm.cacheKeyErr != nil {
		return 0
	}
	bs := c.BlockSize()
	held := min(ks.Len(), len(tokens))
	if held/bs <= g.pfx.stored {
		return 0
	}
	keys := g.pfx.keys
	if held/bs > len(keys) { // the output's blocks
		keys = prefixcache.Chain(g.lm.cacheKey, tokens[:held/bs*bs], bs)
	}
	created := 0
	for i := g.pfx.stored; i < held/bs; i++ {
		if c.Contains(keys[i]) == prefixcache.Hot {
			continue
		}
		data, err := ks.ExportKV(i*bs, (i+1)*bs)
		if err != nil {
			g.r.cfg.Logger.Warn("prefix cache: block not exported", "model", g.lm.name, "block", i, "err", err)
			break
		}
		if c.Put(g.lm.cacheKey, keys[i], bs, data) {
			created += bs
		}
	}
	g.pfx.stored = held / bs
	return created
}

// restorePipe is restorePrefix for a pipeline's first stage: the
// longest run of the prompt's blocks this stage's cache holds is
// imported here, then offered to the later stages (Prefixer.Restore),
// which import what their own caches hold of it; every stage keeps the
// positions all of them restored, and only the rest goes through
// prefill — on every stage. For a model with recurrent layers the depth
// is the end of a block every stage holds a state snapshot at
// (stageprefix.go), before the block of the prompt's last token, as on
// one node. When the stages restore nothing (or this stage cannot keep
// what they agreed on) the sequence is dropped downstream and starts
// afresh with its first step.
func (g *generation) restorePipe(ctx context.Context, ps *pipeSequence) int {
	c, pm := g.r.pcache, ps.pm
	pf, ok := pm.p.Down.(Prefixer)
	if c == nil || !ok || g.lm.cacheKeyErr != nil || pm.keyErr != nil || ps.local.Len() != 0 || ps.started || ps.opened {
		return 0
	}
	bs := c.BlockSize()
	g.pfx.keys = prefixcache.Chain(g.lm.cacheKey, g.prompt, bs)
	limit := len(g.prompt) - 1 // the prompt's last token is computed
	if g.lm.recurrent {
		// The state cannot step back from the prompt's end: stop a block
		// short of it, on a block boundary (every stage's).
		limit = limit / bs * bs
	}
	if ctx.Err() != nil || limit <= 0 {
		return 0
	}
	imp := ImportStageBlocks(c, pm.stageKey, g.pfx.keys, pm.m, ps.local.seq, bs, limit)
	if imp.Bad != nil {
		g.r.cfg.Logger.Warn("prefix cache: pipeline block not imported", "model", g.lm.name, "err", imp.Bad)
	}
	ps.local.noteBytes()
	if imp.Depth <= 0 {
		ps.local.Truncate(0)
		return 0
	}
	got, err := pf.Restore(ctx, ps.id, ps.local.seq.MaxLen(), g.pfx.keys[:(imp.Depth+bs-1)/bs], bs, imp.Depth)
	if err == nil && (got == 0 || !KeepStagePrefix(pm.m, ps.local.seq, imp.Blocks, bs, got)) {
		err = fmt.Errorf("the stages agreed on %d positions, which this one holds no state at", got)
		if got == 0 {
			err = errors.New("nothing restored")
		}
	}
	ps.local.noteBytes()
	if err != nil {
		g.r.cfg.Logger.Debug("prefix cache: the later stages restored nothing", "model", g.lm.name, "err", err)
		ps.local.Truncate(0)
		pm.p.Down.Free([]uint64{ps.id})
		return 0
	}
	ps.opened = true
	g.pfx.restored, g.pfx.stored = got, got/bs
	g.r.cfg.Logger.Debug("prefix cache: restored on every stage", "model", g.lm.name, "tokens", got, "prompt", len(g.prompt))
	return got
}

// storePipe is storePrefix for a pipeline's first stage: its blocks go
// into this node's cache and the later stages are told to save theirs
// (Prefixer.Save), under the same chained keys.
func (g *generation) storePipe(ps *pipeSequence, tokens []int) int {
	c, pm := g.r.pcache, ps.pm
	pf, ok := pm.p.Down.(Prefixer)
	if c == nil || !ok || g.lm.cacheKeyErr != nil || pm.keyErr != nil || !ps.started || !StageCacheable(pm.m) {
		return 0
	}
	bs := c.BlockSize()
	held := min(ps.local.Len(), len(tokens))
	if held/bs <= g.pfx.stored {
		return 0
	}
	keys := g.pfx.keys
	if held/bs > len(keys) { // the output's blocks
		keys = prefixcache.Chain(g.lm.cacheKey, tokens[:held/bs*bs], bs)
	}
	created := 0
	for i := g.pfx.stored; i < held/bs; i++ {
		key := StageBlockKey(pm.stageKey, keys[i])
		if c.Contains(key) == prefixcache.Hot {
			continue
		}
		data, err := ps.local.ExportKV(i*bs, (i+1)*bs)
		if err != nil {
			g.r.cfg.Logger.Warn("prefix cache: pipeline block not exported", "model", g.lm.name, "block", i, "err", err)
			break
		}
		if c.Put(g.lm.cacheKey, key, bs, data) {
			created += bs
		}
	}
	pf.Save(ps.id, bs, g.pfx.stored, keys[g.pfx.stored:held/bs])
	g.pfx.stored = held / bs
	return created
}

// Len, ExportKV, ImportKV and Truncate give the prefix cache the CPU
// sequence's KV.
func (s *cpuSequence) Len() int                              { return s.seq.Len() }
func (s *cpuSequence) Truncate(n int)                        { s.seq.Truncate(n) }
func (s *cpuSequence) ExportKV(from, to int) ([]byte, error) { return s.seq.ExportKV(from, to) }
func (s *cpuSequence) StateLen() int                         { return s.seq.StateLen() }
func (s *cpuSequence) ImportKV(block []byte) error {
	err := s.seq.ImportKV(block)
	s.noteBytes()
	return err
}

// noteBytes records the memory the sequence's caches hold now.
func (s *cpuSequence) noteBytes() {
	alloc, _ := s.seq.CacheBytes()
	s.kvBytes.Store(alloc)
}

// ProbeCache renders and tokenizes req for model as a generation would
// and reports which of its blocks the prefix cache holds, without
// changing the cache.
func (r *Runner) ProbeCache(ctx context.Context, model string, req prompt.Request) (prefixcache.Probe, error) {
	e, err := r.entry(model)
	if err != nil {
		return prefixcache.Probe{}, err
	}
	text, err := r.textOf(ctx, model)
	if err != nil {
		return prefixcache.Probe{}, err
	}
	p, err := text.Tokenize(req)
	if err != nil {
		return prefixcache.Probe{}, err
	}
	r.mu.Lock()
	lm := e.loaded
	r.mu.Unlock()
	bs := prefixcache.DefaultBlockSize
	if r.pcache != nil {
		bs = r.pcache.BlockSize()
	}
	out := prefixcache.Probe{ModelLoaded: lm != nil, TotalTokens: len(p.Tokens), BlockSize: bs, TotalBlocks: (len(p.Tokens) + bs - 1) / bs}
	if r.pcache != nil {
		key, kerr := prefixcache.Key{}, error(nil)
		if lm != nil {
			key, kerr = lm.cacheKey, lm.cacheKeyErr
		} else {
			key, kerr = modelCacheKey(e.info.Path, r.backends.forModel(e.info.ID), r.backends.kvLayout(e.info.ID))
		}
		if kerr == nil {
		probe:
			for _, k := range prefixcache.Chain(key, p.Tokens, bs) {
				switch r.pcache.Contains(k) {
				case prefixcache.Hot:
					out.HotBlocks++
				case prefixcache.Disk:
					out.DiskBlocks++
				default:
					break probe
				}
			}
		}
	}
	out.ColdBlocks = out.TotalBlocks - out.HotBlocks - out.DiskBlocks
	out.HitTokens = (out.HotBlocks + out.DiskBlocks) * bs
	out.ColdTokens = out.TotalTokens - out.HitTokens
	return out, nil
}

// ClearHotCache empties the prefix cache's RAM tier.
func (r *Runner) ClearHotCache(ctx context.Context) (prefixcache.Cleared, error) {
	if r.pcache == nil {
		return prefixcache.Cleared{}, nil
	}
	return r.pcache.ClearHot(), nil
}

// ClearSSDCache removes the prefix cache's block files.
func (r *Runner) ClearSSDCache(ctx context.Context) (prefixcache.Cleared, error) {
	if r.pcache == nil {
		return prefixcache.Cleared{}, nil
	}
	return r.pcache.ClearDisk()
}

// CacheStats are the prefix cache's counters (zero when it is off).
func (r *Runner) CacheStats() prefixcache.Stats {
	if r.pcache == nil {
		return prefixcache.Stats{}
	}
	return r.pcache.Stats()
}

// FlushCache waits until the blocks queued for the SSD are written.
func (r *Runner) FlushCache() {
	if r.pcache != nil {
		r.pcache.Flush()
	}
}
