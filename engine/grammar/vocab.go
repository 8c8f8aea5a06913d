package grammar

import (
	"bytes"
	"slices"
	"sync"
	"unicode/utf8"

	"fusion/engine/sample"
)

// Vocab is a tokenizer's vocabulary as a byte trie, built once and shared
// (read-only) by all matchers.
type Vocab struct {
	tokens [][]byte
	eos    []int
	all    trie // every maskable token

	// Tokens that, from inside a string at a character boundary, stay inside
	// it whatever comes before (no closing quote, valid escapes and UTF-8):
	// strSafe has their bits, strRest is the trie of all the others. A
	// thread in such a state with room for any token needs only strRest
	// walked.
	strSafe []uint64
	strRest trie
	// A safe token that ends inside an escape or a character (a \u, a
	// split UTF-8 sequence) raises the bytes needed to finish the
	// string by its extra (1 to maxExtra); strFits[k] has the safe
	// tokens of extra at most k, for masks under a budget.
	strFits  [][]uint64
	maxExtra int
	// The safe tokens by the number of code points they add, ascending, and
	// the largest such number: with fewer than maxSafeLen code points left,
	// only a prefix of safeByLen is set.
	safeByLen  []int32
	safeLen    []int32
	safeExtra  []int32
	maxSafeLen int
	maxTokLen  int // bytes of the longest token

	// upTo[n]: the safe tokens of at most n code points, built on first
	// use (a short string's room) and then read-only.
	upToOnce []sync.Once
	upTo     []sample.Bitset
}

// safeUpTo returns the safe tokens of at most room code points (room <
// maxSafeLen).
func (v *Vocab) safeUpTo(room int) sample.Bitset {
	v.upToOnce[room].Do(func() {
		b := sample.NewBitset(len(v.tokens))
		for i, id := range v.safeByLen {
			if int(v.safeLen[i]) > room {
				break
			}
			b.Set(int(id))
		}
		v.upTo[room] = b
	})
	return v.upTo[room]
}

// trie: node i has edges edgeStart[i]:edgeStart[i+1] and the ids of the
// tokens ending exactly there at tokStart[i]:tokStart[i+1]. Node 0 is the
// root.
type trie struct {
	edgeStart []int32
	edgeByte  []byte
	edgeNode  []int32
	tokStart  []int32
	tokIDs    []int32
	// The tokens below node i (itself included) are sorted[spanLo[i]:
	// spanHi[i]]; strSub[i] is set when the rest of each of them, from
	// node i's depth on, is string content that is safe from a character
	// boundary (see Vocab.strSafe), so a string thread there takes them
	// all.
	sorted         []int32
	spanLo, spanHi []int32
	strSub         []bool
}

// NewVocab builds the tries of tokens (id -> decoded bytes). Empty entries
// (special tokens, unused ids) are never allowed except the ids in eos, which
// are allowed when the document is complete.
func NewVocab(tokens [][]byte, eos []int) *Vocab {
	v := &Vocab{tokens: tokens, eos: slices.Clone(eos), strSafe: make([]uint64, (len(tokens)+63)/64)}
	var ids, rest []int32
	free := &node{kind: kString, maxLen: 1 << 30}
	for id, t := range tokens {
		if len(t) == 0 || v.isEOS(id) {
			continue
		}
		ids = append(ids, int32(id))
		v.maxTokLen = max(v.maxTokLen, len(t))
		th := thread{top: frame{n: free, st: sIn}}
		var buf [2]thread
		for _, b := range t {
			out := stepString(th, b, buf[:0])
			if len(out) != 1 || out[0].top.n != free {
				th.top.n = nil
				break
			}
			th = out[0]
		}
		if th.top.n != nil {
			v.strSafe[id/64] |= 1 << (id % 64)
			v.safeByLen = append(v.safeByLen, int32(id))
			v.safeLen = append(v.safeLen, th.top.a)
			// In the free string (no minLength) a thread at a character
			// boundary needs 1 byte, the quote.
			extra := frameCost(th.top) - 1
			v.safeExtra = append(v.safeExtra, extra)
			v.maxExtra = max(v.maxExtra, int(extra))
			v.maxSafeLen = max(v.maxSafeLen, int(th.top.a))
		} else {
			rest = append(rest, int32(id))
		}
	}
	order := make([]int, len(v.safeByLen))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(v.safeLen[a] - v.safeLen[b]) })
	byLen, lens, extras := make([]int32, len(order)), make([]int32, len(order)), make([]int32, len(order))
	for i, o := range order {
		byLen[i], lens[i], extras[i] = v.safeByLen[o], v.safeLen[o], v.safeExtra[o]
	}
	v.safeByLen, v.safeLen, v.safeExtra = byLen, lens, extras
	v.strFits = make([][]uint64, v.maxExtra+1)
	for k := range v.strFits {
		v.strFits[k] = make([]uint64, len(v.strSafe))
	}
	for i, id := range v.safeByLen {
		for k := int(v.safeExtra[i]); k <= v.maxExtra; k++ {
			v.strFits[k][id/64] |= 1 << (id % 64)
		}
	}
	v.upToOnce = make([]sync.Once, v.maxSafeLen+1)
	v.upTo = make([]sample.Bitset, v.maxSafeLen+1)
	safeFrom := make([]int32, len(tokens))
	for id, t := range tokens {
		safeFrom[id] = int32(safeSuffixStart(t))
	}
	v.all = buildTrie(tokens, ids, safeFrom)
	v.strRest = buildTrie(tokens, rest, safeFrom)
	return v
}

// safeSuffixStart is where the safe tail of t begins: from there on, t is
// whole UTF-8 characters that a JSON string takes unescaped. A suffix
// from d >= safeSuffixStart(t) is safe from a character boundary iff d
// starts a character (or is the end).
func safeSuffixStart(t []byte) int {
	start := 0
	for i := 0; i < len(t); {
		r, size := utf8.DecodeRune(t[i:])
		if r == utf8.RuneError && size <= 1 || r == '"' || r == '\\' || r < 0x20 {
			start = i + max(size, 1)
		}
		i += max(size, 1)
	}
	return start
}

func buildTrie(tokens [][]byte, ids []int32, safeFrom []int32) trie {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b int32) int { return bytes.Compare(tokens[a], tokens[b]) })
	var t trie
	t.sorted = ids
	// Nodes are numbered in the order of a queue of (lo, hi, depth) ranges
	// over the sorted ids.
	type span struct{ lo, hi, depth int }
	queue := []span{{0, len(ids), 0}}
	t.edgeStart = append(t.edgeStart, 0)
	t.tokStart = append(t.tokStart, 0)
	for qi := 0; qi < len(queue); qi++ {
		s := queue[qi]
		t.spanLo = append(t.spanLo, int32(s.lo))
		t.spanHi = append(t.spanHi, int32(s.hi))
		sub := s.depth > 0
		for _, id := range ids[s.lo:s.hi] {
			if !sub {
				break
			}
			tok := tokens[id]
			sub = s.depth >= int(safeFrom[id]) && (s.depth == len(tok) || tok[s.depth]&0xC0 != 0x80)
		}
		t.strSub = append(t.strSub, sub)
		lo := s.lo
		for lo < s.hi && len(tokens[ids[lo]]) == s.depth {
			t.tokIDs = append(t.tokIDs, ids[lo])
			lo++
		}
		for lo < s.hi {
			b := tokens[ids[lo]][s.depth]
			hi := lo
			for hi < s.hi && tokens[ids[hi]][s.depth] == b {
				hi++
			}
			t.edgeByte = append(t.edgeByte, b)
			t.edgeNode = append(t.edgeNode, int32(len(queue)))
			queue = append(queue, span{lo, hi, s.depth + 1})
			lo = hi
		}
		t.edgeStart = append(t.edgeStart, int32(len(t.edgeByte)))
		t.tokStart = append(t.tokStart, int32(len(t.tokIDs)))
	}
	return t
}

// Size returns the number of token ids.
func (v *Vocab) Size() int { return len(v.tokens) }

// Token returns the bytes of id.
func (v *Vocab) Token(id int) []byte { return v.tokens[id] }

func (v *Vocab) isEOS(id int) bool { return slices.Contains(v.eos, id) }

// Mask writes to dst (at least (v.Size()+63)/64 words) the tokens allowed
// next: those whose bytes the grammar accepts, and EOS once Done. Under a
// budget (SetBudget) a token is allowed only if the document can still be
// finished in the tokens left after it; if that leaves nothing (the budget
// was too small from the start) the mask is the unbudgeted one.
func (m *Matcher) Mask(v *Vocab, dst sample.Bitset) {
	clear(dst)
	if m.ended {
		return
	}
	m.filter, m.maxTokLen = false, v.maxTokLen
	if m.budget >= 0 {
		limit := int32(min(m.budget-1, int(infBytes)))
		// Filter only when some token could overshoot: one token of
		// maxTokLen bytes raises the cost by at most maxTokLen*maxOpen.
		if limit < satAdd(minCost(m.threads), satMul(int32(v.maxTokLen), m.maxOpen)) {
			m.filter, m.limit = true, limit
		}
	}
	m.mask(v, dst)
	if m.filter && !anySet(dst) {
		m.filter = false
		m.mask(v, dst)
	}
}

func (m *Matcher) mask(v *Vocab, dst sample.Bitset) {
	if m.Done() {
		for _, id := range v.eos {
			dst.Set(id)
		}
	}
	if len(m.bufs) == 0 {
		m.bufs = make([][]thread, 16)
	}
	// Threads inside a string at a character boundary take the safe tokens
	// that fit the length left from precomputed sets; only the rest of the
	// vocabulary is walked for them. Under a budget a safe token fits when
	// the thread's cost plus the token's extra (see Vocab.strFits) does,
	// once the string's minLength is met; before that, a thread over
	// budget takes the safe tokens whose code points pay for it, and one
	// within budget is walked whole.
	var inStr, other []thread
	room := -1
	for _, t := range m.threads {
		if f := t.top; f.n != nil && f.n.kind == kString && f.st == sIn {
			inStr = append(inStr, t)
			room = max(room, f.n.maxLen-int(f.a))
		} else {
			other = append(other, t)
		}
	}
	if m.filter && len(inStr) > 1 {
		other = append(other, inStr...)
		inStr = nil
	} else if t := inStr; m.filter && len(t) == 1 && threadCost(t[0]) > m.limit {
		// Over budget inside a string: a safe token helps only by meeting
		// minLength with enough code points; the rest is walked.
		f := t[0].top
		need := threadCost(t[0]) - m.limit
		if deficit := int32(f.n.minLen) - f.a; need <= deficit {
			for i, id := range v.safeByLen {
				if int(v.safeLen[i]) > room {
					break
				}
				if min(v.safeLen[i], deficit)-v.safeExtra[i] >= need {
					dst[id/64] |= 1 << (id % 64)
				}
			}
		}
		m.walk(&v.strRest, 0, inStr, 0, dst)
		inStr = nil
	} else if t := inStr; m.filter && len(t) == 1 && int(t[0].top.a) < t[0].top.n.minLen {
		other = append(other, inStr...)
		inStr = nil
	}
	safe := v.strSafe
	if m.filter && len(inStr) == 1 {
		safe = v.strFits[min(int(m.limit-threadCost(inStr[0])), v.maxExtra)]
	}
	if len(inStr) > 0 {
		if room >= v.maxSafeLen {
			for i, w := range safe {
				dst[i] |= w
			}
		} else {
			// Several string threads with different room: the largest room
			// over-approximates, so set bits by length only for one thread.
			if len(inStr) > 1 {
				other = append(other, inStr...)
				inStr = nil
			} else {
				for i, w := range v.safeUpTo(room) {
					dst[i] |= w & safe[i]
				}
			}
		}
		if len(inStr) > 0 {
			m.walkStrRest(v, inStr, dst)
		}
	}
	switch {
	case len(other) == 1 && inPattern(other[0]):
		m.walkPattern(&v.all, 0, other[0], 0, dst)
	case len(other) == 1 && inRaw(other[0]):
		m.walkRaw(&v.all, 0, other[0], 0, dst, nil)
	case len(other) > 0:
		m.walk(&v.all, 0, other, 0, dst)
	}
}

// strKey identifies what the unsafe tokens allow from inside a string
// whose length bounds are out of reach of any token: the string node and
// the (immutable, shared) stack around it.
type strKey struct {
	n             *node
	rest          *stack
	depth, values int32
}

// walkStrRest walks the unsafe tokens for the one string thread ts[0],
// reusing the previous step's result when the thread is the same string
// (same node and parents) with its length bounds out of reach, as along
// a long string. The walk records each allowed token's cost of finishing,
// so under a budget the tokens that fit are picked from the same result.
func (m *Matcher) walkStrRest(v *Vocab, ts []thread, dst sample.Bitset) {
	t := ts[0]
	f := t.top
	if len(ts) != 1 || int(f.a) < f.n.minLen || f.n.maxLen-int(f.a) < v.maxTokLen {
		m.walk(&v.strRest, 0, ts, 0, dst)
		return
	}
	key := strKey{f.n, t.rest, t.depth, t.values}
	if m.strBits == nil || m.strKey != key {
		if m.strBits == nil {
			m.strBits = sample.NewBitset(v.Size())
		}
		clear(m.strBits)
		filter := m.filter
		m.filter, m.collect, m.strCosts = false, true, m.strCosts[:0]
		m.walk(&v.strRest, 0, ts, 0, m.strBits)
		m.filter, m.collect = filter, false
		m.strKey = key
	}
	if m.filter {
		for _, tc := range m.strCosts {
			if tc.cost <= m.limit {
				dst[tc.id/64] |= 1 << (tc.id % 64)
			}
		}
		return
	}
	for i, w := range m.strBits {
		dst[i] |= w
	}
}

// take allows ids, tokens after which the document costs cost bytes to
// finish: all of them, or none over the limit under a budget; when
// collecting, their costs are recorded too.
//
//go:norace
func (m *Matcher) take(ids []int32, cost int32, dst sample.Bitset) {
	if m.filter && cost > m.limit {
		return
	}
	for _, id := range ids {
		dst[id/64] |= 1 << (id % 64)
	}
	if m.collect {
		for _, id := range ids {
			m.strCosts = append(m.strCosts, tokenCost{id, cost})
		}
	}
}

// walk allows the tokens below node of v that the threads ts accept. It
// and walkPattern, the per-token loops of Mask, run uninstrumented under
// -race: they read the immutable vocabulary and write the matcher's own
// buffers and dst, which Mask declares written (clear) before walking.
//
//go:norace
func (m *Matcher) walk(v *trie, node int32, ts []thread, depth int, dst sample.Bitset) {
	if depth+1 >= len(m.bufs) {
		m.bufs = append(m.bufs, make([][]thread, len(m.bufs))...)
	}
	for e := v.edgeStart[node]; e < v.edgeStart[node+1]; e++ {
		next := advance(ts, v.edgeByte[e], m.bufs[depth+1][:0])
		m.bufs[depth+1] = next
		if len(next) == 0 {
			continue
		}
		child := v.edgeNode[e]
		if v.strSub[child] && inLongString(next, m.maxTokLen) && (!m.filter && !m.collect || len(next) == 1 && int(next[0].top.a) >= next[0].top.n.minLen) {
			// Every token below continues the string, ending at a
			// character boundary: take them all. Past the string's
			// minLength (one thread), that leaves the cost of finishing
			// as it is here, which budgets need exact.
			m.take(v.sorted[v.spanLo[child]:v.spanHi[child]], minCost(next), dst)
			continue
		}
		if ids := v.tokIDs[v.tokStart[child]:v.tokStart[child+1]]; len(ids) > 0 {
			m.take(ids, minCost(next), dst)
		}
		if v.edgeStart[child] < v.edgeStart[child+1] {
			if len(next) == 1 && inPattern(next[0]) {
				m.walkPattern(v, child, next[0], depth+1, dst)
			} else if len(next) == 1 && inRaw(next[0]) {
				m.walkRaw(v, child, next[0], depth+1, dst, nil)
			} else {
				m.walk(v, child, next, depth+1, dst)
			}
		}
	}
}

func inPattern(t thread) bool {
	return t.top.n != nil && t.top.n.kind == kString && t.top.st == sPat
}

// walkPattern is walk for one thread inside a string with a pattern: the
// DFA steps as stepString's sPat does, on the frame alone, without the
// generic machinery; the closing quote goes through walk.
//
//go:norace
func (m *Matcher) walkPattern(v *trie, node int32, t thread, depth int, dst sample.Bitset) {
	if depth+1 >= len(m.bufs) {
		m.bufs = append(m.bufs, make([][]thread, len(m.bufs))...)
	}
	for e := v.edgeStart[node]; e < v.edgeStart[node+1]; e++ {
		b, child := v.edgeByte[e], v.edgeNode[e]
		if b == '"' {
			one := [1]thread{t}
			next := advance(one[:], b, m.bufs[depth+1][:0])
			m.bufs[depth+1] = next
			if len(next) == 0 {
				continue
			}
			if ids := v.tokIDs[v.tokStart[child]:v.tokStart[child+1]]; len(ids) > 0 {
				m.take(ids, minCost(next), dst)
			}
			if v.edgeStart[child] < v.edgeStart[child+1] {
				m.walk(v, child, next, depth+1, dst)
			}
			continue
		}
		u, ok := dfaStep(t, b)
		if !ok {
			continue
		}
		if ids := v.tokIDs[v.tokStart[child]:v.tokStart[child+1]]; len(ids) > 0 {
			m.take(ids, threadCost(u), dst)
		}
		if v.edgeStart[child] < v.edgeStart[child+1] {
			m.walkPattern(v, child, u, depth+1, dst)
		}
	}
}

// dfaStep advances a pattern or raw string frame by b on its DFA alone,
// within its length bound.
func dfaStep(t thread, b byte) (thread, bool) {
	n := t.top.n
	q := n.dfa.next[t.top.b][b]
	if q < 0 {
		return t, false
	}
	if b&0xC0 != 0x80 {
		t.top.a++
	}
	if int(t.top.a)+int(n.dfa.dist[q]) > n.maxLen {
		return t, false
	}
	t.top.b = q
	return t, true
}

func inRaw(t thread) bool { return t.top.n != nil && t.top.n.kind == kRaw }

// walkRaw is walkPattern for one thread inside a raw string (kRaw: Gemma
// 4's strings and bare keys, Qwen3-Coder's parameters): the DFA steps on
// the frame alone, as stepRaw's first path does; where the string may end,
// the byte also goes to the parent through walk, as stepRaw's second.
// The parent is the same wherever the string ends, so ends, the bytes it
// takes, is found once (nil: not yet).
//
//go:norace
func (m *Matcher) walkRaw(v *trie, node int32, t thread, depth int, dst sample.Bitset, ends *[256]bool) {
	if depth+1 >= len(m.bufs) {
		m.bufs = append(m.bufs, make([][]thread, len(m.bufs))...)
	}
	n := t.top.n
	d := n.dfa
	if ends == nil {
		ends = new([256]bool)
		if t.rest != nil {
			var tmp [8]thread
			for b := range ends {
				ends[b] = len(step(pop(t), byte(b), tmp[:0])) > 0
			}
		}
	}
	canEnd := d.accept[t.top.b] && int(t.top.a) >= n.minLen && t.rest != nil
	for e := v.edgeStart[node]; e < v.edgeStart[node+1]; e++ {
		b, child := v.edgeByte[e], v.edgeNode[e]
		if canEnd && ends[b] {
			next := step(pop(t), b, m.bufs[depth+1][:0])
			m.bufs[depth+1] = next
			if len(next) > 0 {
				if ids := v.tokIDs[v.tokStart[child]:v.tokStart[child+1]]; len(ids) > 0 {
					m.take(ids, minCost(next), dst)
				}
				if v.edgeStart[child] < v.edgeStart[child+1] {
					m.walk(v, child, next, depth+1, dst)
				}
			}
		}
		u, ok := dfaStep(t, b)
		if !ok {
			continue
		}
		if ids := v.tokIDs[v.tokStart[child]:v.tokStart[child+1]]; len(ids) > 0 {
			m.take(ids, threadCost(u), dst)
		}
		if v.edgeStart[child] < v.edgeStart[child+1] {
			m.walkRaw(v, child, u, depth+1, dst, ends)
		}
	}
}

// inLongString reports whether every thread is inside a string at a
// character boundary with room for any token.
func inLongString(ts []thread, maxTokLen int) bool {
	for _, t := range ts {
		f := t.top
		if f.n == nil || f.n.kind != kString || f.st != sIn || f.n.maxLen-int(f.a) < maxTokLen {
			return false
		}
	}
	return true
}

func anySet(b sample.Bitset) bool {
	for _, w := range b {
		if w != 0 {
			return true
		}
	}
	return false
}
