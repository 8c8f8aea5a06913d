package tokenizer

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// bpeModel is the BPE model of tokenizer.json: a vocabulary and ranked
// merges.
type bpeModel struct {
	vocab map[string]int32
	pairs *pairTable
	// byteLevel: pieces are raw bytes and each byte starts as the token of
	// its byte-level rune (byteIDs); otherwise each rune starts as the token
	// spelled by it.
	byteLevel bool
	byteIDs   [256]int32
	// ignoreMerges emits a piece found whole in the vocabulary directly;
	// wholeVocab finds it by its raw bytes when byteLevel.
	ignoreMerges bool
	wholeVocab   map[string]int32
	unkID        int32 // -1 if none
	fuseUnk      bool
	byteFallback bool
	cache        *pieceCache
}

// maxCachedPiece is the length from which pieces are not cached.
const maxCachedPiece = 256

// bpeScratch is the per-call working memory of merging, reused through a
// pool.
type bpeScratch struct {
	ids        []int32
	prev, next []int32
	heap       []uint64 // rank<<32 | position, a min-heap
	unigram    unigramScratch
}

// encode appends the ids of one pre-tokenized piece to dst.
func (m *bpeModel) encode(piece string, sc *bpeScratch, dst []int) []int {
	if m.byteLevel && len(piece) == 1 && m.byteIDs[piece[0]] >= 0 {
		return append(dst, int(m.byteIDs[piece[0]]))
	}
	if m.ignoreMerges {
		if id, ok := m.whole(piece); ok {
			return append(dst, int(id))
		}
	}
	cacheable := len(piece) < maxCachedPiece
	if cacheable {
		if ids, ok := m.cache.get(piece); ok {
			return appendIDs(dst, ids)
		}
	}
	ids := m.merge(piece, sc)
	if cacheable {
		m.cache.put(piece, slices.Clone(ids))
	}
	return appendIDs(dst, ids)
}

// whole returns the id of the piece as a single vocabulary token.
func (m *bpeModel) whole(piece string) (int32, bool) {
	if m.byteLevel {
		id, ok := m.wholeVocab[piece]
		return id, ok
	}
	id, ok := m.vocab[piece]
	return id, ok
}

// merge returns the ids of a piece after all merges; the slice belongs to
// sc.
func (m *bpeModel) merge(piece string, sc *bpeScratch) []int32 {
	m.initialSymbols(piece, sc)
	n := len(sc.ids)
	if n < 2 {
		return sc.ids
	}
	sc.prev, sc.next = sc.prev[:0], sc.next[:0]
	for i := range n {
		sc.prev = append(sc.prev, int32(i-1))
		sc.next = append(sc.next, int32(i+1))
	}
	sc.next[n-1] = -1
	ids, prev, next := sc.ids, sc.prev, sc.next
	heap := sc.heap[:0]
	for i := 0; i+1 < n; i++ {
		if rank, _, ok := m.pairs.get(ids[i], ids[i+1]); ok {
			heap = append(heap, uint64(rank)<<32|uint64(i))
		}
	}
	heapInit(heap)
	for len(heap) > 0 {
		var top uint64
		top, heap = heapPop(heap)
		rank, pos := int32(top>>32), int32(uint32(top))
		right := next[pos]
		if ids[pos] < 0 || right < 0 {
			continue
		}
		r, merged, ok := m.pairs.get(ids[pos], ids[right])
		if !ok || r != rank {
			continue // stale: a neighbour merged since this entry was queued
		}
		ids[pos] = merged
		ids[right] = -1
		next[pos] = next[right]
		if next[pos] >= 0 {
			prev[next[pos]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if r, _, ok := m.pairs.get(ids[p], ids[pos]); ok {
				heap = heapPush(heap, uint64(r)<<32|uint64(p))
			}
		}
		if q := next[pos]; q >= 0 {
			if r, _, ok := m.pairs.get(ids[pos], ids[q]); ok {
				heap = heapPush(heap, uint64(r)<<32|uint64(pos))
			}
		}
	}
	sc.heap = heap
	out := ids[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	sc.ids = out
	return out
}

// initialSymbols fills sc.ids with the tokens a piece starts as: one per
// byte (byte-level) or per rune, with unknown ones replaced as HF does (byte
// fallback tokens, the unknown token, or nothing).
func (m *bpeModel) initialSymbols(piece string, sc *bpeScratch) {
	ids := sc.ids[:0]
	if m.byteLevel && m.unkID < 0 {
		for i := 0; i < len(piece); i++ {
			if id := m.byteIDs[piece[i]]; id >= 0 {
				ids = append(ids, id)
			}
		}
		sc.ids = ids
		return
	}
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			ids = append(ids, m.unkID)
			pendingUnk = false
		}
	}
	for i := 0; i < len(piece); {
		var id int32 = -1
		var size int
		if m.byteLevel {
			id, size = m.byteIDs[piece[i]], 1
		} else {
			_, size = utf8.DecodeRuneInString(piece[i:])
			if v, ok := m.vocab[piece[i:i+size]]; ok {
				id = v
			}
		}
		char := piece[i : i+size]
		i += size
		if id >= 0 {
			flushUnk()
			ids = append(ids, id)
			continue
		}
		if m.byteFallback {
			if fallback, ok := m.byteFallbackIDs(char); ok {
				ids = append(ids, fallback...)
				continue
			}
		}
		if m.unkID >= 0 {
			if !pendingUnk || !m.fuseUnk {
				flushUnk()
				pendingUnk = true
			}
		}
	}
	flushUnk()
	sc.ids = ids
}

// byteFallbackIDs returns the <0xXX> tokens of the bytes of char, if all
// are in the vocabulary.
func (m *bpeModel) byteFallbackIDs(char string) ([]int32, bool) {
	out := make([]int32, 0, len(char))
	for i := 0; i < len(char); i++ {
		id, ok := m.vocab[fmt.Sprintf("<0x%02X>", char[i])]
		if !ok {
			return nil, false
		}
		out = append(out, id)
	}
	return out, true
}

// heapInit orders h as a min-heap.
func heapInit(h []uint64) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent] <= h[i] {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
	return h
}

func heapPop(h []uint64) (uint64, []uint64) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	heapDown(h, 0)
	return top, h
}

func heapDown(h []uint64, i int) {
	for {
		smallest, left := i, 2*i+1
		if left < len(h) && h[left] < h[smallest] {
			smallest = left
		}
		if right := left + 1; right < len(h) && h[right] < h[smallest] {
			smallest = right
		}
		if smallest == i {
			return
		}
		h[i], h[smallest] = h[smallest], h[i]
		i = smallest
	}
}
