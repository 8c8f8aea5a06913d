package runner

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sync"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/grammar"
)

// grammarCacheSize is how many compiled grammars a runner keeps.
const grammarCacheSize = 64

// grammarCache keeps recently compiled grammars by a hash of what they
// were compiled from, least recently used out first: agents send the same
// tools (or response schema) every turn, and a large schema takes
// milliseconds to compile. Grammars are immutable, so requests share
// them; a failed compilation is not kept.
type grammarCache struct {
	mu     sync.Mutex
	size   int
	order  *list.List // of *grammarEntry, most recently used first
	byKey  map[[32]byte]*list.Element
	hits   int64
	builds int64
}

type grammarEntry struct {
	key [32]byte
	g   *grammar.Grammar
}

func newGrammarCache(size int) *grammarCache {
	return &grammarCache{size: size, order: list.New(), byKey: map[[32]byte]*list.Element{}}
}

// get returns the grammar under key, building it with build on a miss.
func (c *grammarCache) get(key [32]byte, build func() (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	c.mu.Lock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		c.hits++
		c.mu.Unlock()
		return e.Value.(*grammarEntry).g, nil
	}
	c.mu.Unlock()
	g, err := build() // outside the lock: concurrent misses may both build
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.builds++
	if _, ok := c.byKey[key]; !ok {
		c.byKey[key] = c.order.PushFront(&grammarEntry{key, g})
		for c.order.Len() > c.size {
			last := c.order.Back()
			c.order.Remove(last)
			delete(c.byKey, last.Value.(*grammarEntry).key)
		}
	}
	return g, nil
}

// responseFormatKey and toolCallKey hash everything the grammar of a
// response format or of a forced tool choice is compiled from.
func responseFormatKey(rf *engine.ResponseFormat) [32]byte {
	h := sha256.New()
	h.Write([]byte("response_format\x00"))
	if rf.Schema == nil {
		h.Write([]byte("json_object"))
	} else {
		h.Write([]byte("schema\x00"))
		h.Write(rf.Schema)
	}
	return [32]byte(h.Sum(nil))
}

func toolCallKey(family string, tools []*chattemplate.Object, choice engine.ToolChoice, maxCalls int) ([32]byte, error) {
	b, err := json.Marshal(tools)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	h.Write([]byte("tools\x00" + family + "\x00" + choice.Name + "\x00"))
	var n [8]byte
	for _, v := range []int{int(choice.Mode), maxCalls, boolInt(choice.NoParallel)} {
		binary.LittleEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	h.Write(b)
	return [32]byte(h.Sum(nil)), nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
