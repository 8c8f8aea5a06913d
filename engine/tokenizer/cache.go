package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
)

// pieceCache remembers the ids of pre-tokenized pieces. It is safe for
// concurrent use and bounded: each shard holds two generations of at most
// shardLimit entries; when the current one fills up, the previous one is
// dropped and the current one takes its place, so recently used pieces
// survive (a hit in the previous generation moves the entry forward).
type pieceCache struct {
	seed       maphash.Seed
	shardLimit int
	shards     [cacheShards]cacheShard
}

const cacheShards = 32

type cacheShard struct {
	mu       sync.Mutex
	current  map[string][]int32
	previous map[string][]int32
}

func newPieceCache(capacity int) *pieceCache {
	return &pieceCache{seed: maphash.MakeSeed(), shardLimit: max(capacity/(2*cacheShards), 16)}
}

func (c *pieceCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// get returns the ids cached for key; the caller must not modify them.
func (c *pieceCache) get(key string) ([]int32, bool) {
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ids, ok := s.current[key]; ok {
		return ids, true
	}
	ids, ok := s.previous[key]
	if ok {
		s.addLocked(key, ids, c.shardLimit)
	}
	return ids, ok
}

// put caches ids for key; the cache keeps ids, so the caller must not modify
// them afterwards. The key is copied, so that a piece cut from a long text
// does not keep the text alive.
func (c *pieceCache) put(key string, ids []int32) {
	key = strings.Clone(key)
	s := c.shard(key)
	s.mu.Lock()
	s.addLocked(key, ids, c.shardLimit)
	s.mu.Unlock()
}

func (s *cacheShard) addLocked(key string, ids []int32, limit int) {
	if len(s.current) >= limit {
		s.previous, s.current = s.current, nil
	}
	if s.current == nil {
		s.current = make(map[string][]int32, limit)
	}
	s.current[key] = ids
}

// len returns the number of cached entries, counting both generations.
func (c *pieceCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.current) + len(s.previous)
		s.mu.Unlock()
	}
	return n
}

// appendIDs appends cached or merged ids to an Encode result.
func appendIDs(dst []int, ids []int32) []int {
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}
