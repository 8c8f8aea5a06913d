package tokenizer

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// unigramModel is the Unigram model of tokenizer.json (SentencePiece
// unigram, as XLM-R, mT5 and ALBERT use): a piece is cut into the
// vocabulary tokens whose scores (log probabilities) sum highest, found by
// Viterbi over the lattice of every token that starts at every character.
// A character no token covers on its own is unknown, scored the lowest
// score minus unkPenalty; runs of unknown characters fuse into one unknown
// token (HF always fuses), which byte_fallback spells as <0xNN> tokens when
// the vocabulary has them all.
type unigramModel struct {
	trie         tokenTrie
	scores       []float64
	unkID        int32
	unkScore     float64
	byteFallback bool
	byteIDs      [256]int32 // <0xNN> ids, -1 if missing
	vocab        map[string]int32
	// canonical maps an id to the id HF gives its token's text (the last
	// id of a token listed twice).
	canonical []int32
	cache     *pieceCache
}

// unkPenalty is how much lower than the lowest token an unknown character
// scores (SentencePiece's kUnkPenalty).
const unkPenalty = 10.0

func (t *Tokenizer) buildUnigram(cfg *modelJSON) error {
	m := &unigramModel{scores: cfg.Scores, byteFallback: cfg.ByteFallback, vocab: t.vocab,
		cache: newPieceCache(pieceCacheCapacity)}
	if len(cfg.Pieces) == 0 {
		return fmt.Errorf("Unigram: empty vocabulary")
	}
	// HF fails on a character no token covers when there is no unk_id;
	// refusing such a model up front keeps Encode total.
	if cfg.UnkID == nil {
		return fmt.Errorf("Unigram: no unk_id")
	}
	if *cfg.UnkID < 0 || *cfg.UnkID >= len(cfg.Pieces) {
		return fmt.Errorf("Unigram: unk_id %d is outside the vocabulary of %d tokens", *cfg.UnkID, len(cfg.Pieces))
	}
	m.unkID = int32(*cfg.UnkID)
	minScore := cfg.Scores[0]
	for _, s := range cfg.Scores {
		minScore = min(minScore, s)
	}
	m.unkScore = minScore - unkPenalty
	m.canonical = make([]int32, len(cfg.Pieces))
	for id, token := range cfg.Pieces {
		m.canonical[id] = t.vocab[token]
	}
	m.trie = buildTokenTrie(cfg.Pieces, t.vocab)
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := t.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	t.model = m
	return nil
}

// unigramScratch is the lattice of one piece: for each byte offset, the
// best path ending there (score, the token on it, where it starts).
type unigramScratch struct {
	score []float64
	id    []int32
	start []int32 // -1: no path yet
	path  []int32
}

func (m *unigramModel) encode(piece string, sc *bpeScratch, dst []int) []int {
	if piece == "" {
		return dst
	}
	cacheable := len(piece) < maxCachedPiece
	if cacheable {
		if ids, ok := m.cache.get(piece); ok {
			return appendIDs(dst, ids)
		}
	}
	mark := len(dst)
	dst = m.viterbi(piece, &sc.unigram, dst)
	if cacheable {
		ids := make([]int32, len(dst)-mark)
		for i, id := range dst[mark:] {
			ids[i] = int32(id)
		}
		m.cache.put(piece, ids)
	}
	return dst
}

// viterbi finds the best cut of piece as HF's encode_optimized does (ties
// keep the first path found; paths are tried by start, then by length).
func (m *unigramModel) viterbi(piece string, sc *unigramScratch, dst []int) []int {
	n := len(piece)
	sc.score = slices.Grow(sc.score[:0], n+1)[:n+1]
	sc.id = slices.Grow(sc.id[:0], n+1)[:n+1]
	sc.start = slices.Grow(sc.start[:0], n+1)[:n+1]
	for i := range sc.start {
		sc.start[i], sc.score[i] = -1, 0
	}
	for at := 0; at < n; {
		base := sc.score[at]
		_, charLen := utf8.DecodeRuneInString(piece[at:])
		single := false
		m.trie.prefixes(piece[at:], func(length int, id int32) {
			end := at + length
			if s := base + m.scores[id]; sc.start[end] < 0 || s > sc.score[end] {
				sc.score[end], sc.id[end], sc.start[end] = s, id, int32(at)
			}
			if length == charLen {
				single = true
			}
		})
		if !single {
			end := at + charLen
			if s := base + m.unkScore; sc.start[end] < 0 || s > sc.score[end] {
				sc.score[end], sc.id[end], sc.start[end] = s, m.unkID, int32(at)
			}
		}
		at += charLen
	}
	// Walk back, fusing runs of unknown characters.
	sc.path = sc.path[:0]
	for end := n; end > 0; end = int(sc.start[end]) {
		sc.path = append(sc.path, int32(end))
	}
	slices.Reverse(sc.path)
	prev := 0
	for i := 0; i < len(sc.path); i++ {
		end := int(sc.path[i])
		id := sc.id[end]
		if id == m.unkID {
			start := prev
			for i+1 < len(sc.path) && sc.id[sc.path[i+1]] == m.unkID {
				i++
			}
			end = int(sc.path[i])
			dst = m.unknown(piece[start:end], dst)
		} else {
			dst = append(dst, int(m.canonical[id]))
		}
		prev = end
	}
	return dst
}

// unknown appends the ids of a run of unknown characters: the token of
// that text if there is one, else its bytes as <0xNN> tokens with
// byte_fallback (all of them must exist), else the unknown token.
func (m *unigramModel) unknown(text string, dst []int) []int {
	if id, ok := m.vocab[text]; ok {
		return append(dst, int(id))
	}
	if m.byteFallback {
		ok := true
		for i := 0; i < len(text); i++ {
			ok = ok && m.byteIDs[text[i]] >= 0
		}
		if ok {
			for i := 0; i < len(text); i++ {
				dst = append(dst, int(m.byteIDs[text[i]]))
			}
			return dst
		}
	}
	return append(dst, int(m.unkID))
}

// tokenTrie is a byte trie of the vocabulary: node i's children are
// labels[first[i]:first[i+1]] (sorted) leading to nodes child[...]; term[i]
// is the id of the token ending at node i, or -1.
type tokenTrie struct {
	first  []int32
	labels []byte
	child  []int32
	term   []int32
}

func buildTokenTrie(pieces []string, vocab map[string]int32) tokenTrie {
	// A pointer trie first, then flattened breadth first.
	type node struct {
		kids map[byte]*node
		id   int32
		n    int32
	}
	newNode := func() *node { return &node{kids: map[byte]*node{}, id: -1} }
	root := newNode()
	for _, p := range pieces {
		if p == "" {
			continue
		}
		cur := root
		for i := 0; i < len(p); i++ {
			next, ok := cur.kids[p[i]]
			if !ok {
				next = newNode()
				cur.kids[p[i]] = next
			}
			cur = next
		}
		cur.id = vocab[p]
	}
	var t tokenTrie
	queue := []*node{root}
	for i := 0; i < len(queue); i++ {
		nd := queue[i]
		nd.n = int32(i)
		t.term = append(t.term, nd.id)
		t.first = append(t.first, int32(len(t.labels)))
		labels := make([]byte, 0, len(nd.kids))
		for b := range nd.kids {
			labels = append(labels, b)
		}
		slices.Sort(labels)
		for _, b := range labels {
			t.labels = append(t.labels, b)
			t.child = append(t.child, int32(len(queue)))
			queue = append(queue, nd.kids[b])
		}
	}
	t.first = append(t.first, int32(len(t.labels)))
	return t
}

// prefixes calls fn with the length and id of every token that is a
// prefix of s, shortest first.
func (t *tokenTrie) prefixes(s string, fn func(length int, id int32)) {
	node := int32(0)
	for i := 0; i < len(s); i++ {
		lo, hi := int(t.first[node]), int(t.first[node+1])
		j, found := slices.BinarySearch(t.labels[lo:hi], s[i])
		if !found {
			return
		}
		node = t.child[lo+j]
		if id := t.term[node]; id >= 0 {
			fn(i+1, id)
		}
	}
}
