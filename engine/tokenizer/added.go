package tokenizer

import (
	"sort"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json "added_tokens".
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text, leftmost first and longest at a
// position, with the lstrip/rstrip/single_word rules of HF tokenizers.
type addedMatcher struct {
	nodes  []trieNode
	tokens []addedToken
	// first marks the bytes a token can start with.
	first [256]bool
}

type trieNode struct {
	edges []trieEdge // sorted by byte
	token int32      // index in tokens of the token ending here, or -1
}

type trieEdge struct {
	b    byte
	next int32
}

// addedMatch is one added token found in a text. The token covers
// text[start:stop] including the white space it strips; the search goes on
// at resume, the end of the token's own text.
type addedMatch struct {
	start, stop, resume int
	id                  int
}

// newAddedMatcher builds a matcher over the given tokens, which it matches
// by their content or, when a content function is given, by what it returns.
// Empty contents are skipped; a later token with the same content wins.
func newAddedMatcher(tokens []addedToken, content func(addedToken) string) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{token: -1}}}
	for _, tok := range tokens {
		text := tok.Content
		if content != nil {
			text = content(tok)
		}
		if text == "" {
			continue
		}
		node := int32(0)
		for i := 0; i < len(text); i++ {
			node = m.child(node, text[i])
		}
		m.nodes[node].token = int32(len(m.tokens))
		m.tokens = append(m.tokens, tok)
		m.first[text[0]] = true
	}
	return m
}

// child returns the child of node along b, creating it.
func (m *addedMatcher) child(node int32, b byte) int32 {
	edges := m.nodes[node].edges
	i := sort.Search(len(edges), func(i int) bool { return edges[i].b >= b })
	if i < len(edges) && edges[i].b == b {
		return edges[i].next
	}
	next := int32(len(m.nodes))
	m.nodes = append(m.nodes, trieNode{token: -1})
	edges = append(edges, trieEdge{})
	copy(edges[i+1:], edges[i:])
	edges[i] = trieEdge{b: b, next: next}
	m.nodes[node].edges = edges
	return next
}

// empty reports whether the matcher has no tokens.
func (m *addedMatcher) empty() bool { return len(m.tokens) == 0 }

// longestAt returns the end of the longest token starting at text[p] and
// its index, or -1.
func (m *addedMatcher) longestAt(text string, p int) (end int, token int32) {
	end, token = -1, -1
	node := int32(0)
	for i := p; i < len(text); i++ {
		next := int32(-1)
		for _, e := range m.nodes[node].edges {
			if e.b == text[i] {
				next = e.next
				break
			}
			if e.b > text[i] {
				break
			}
		}
		if next < 0 {
			break
		}
		node = next
		if t := m.nodes[node].token; t >= 0 {
			end, token = i+1, t
		}
	}
	return end, token
}

// next returns the first added token in text found from byte from on.
// offset is where the previous token stopped: lstrip never reaches before
// it, and a token starting before it is skipped.
func (m *addedMatcher) next(text string, from, offset int) (addedMatch, bool) {
	for p := from; p < len(text); p++ {
		if !m.first[text[p]] {
			continue
		}
		end, idx := m.longestAt(text, p)
		if idx < 0 {
			continue
		}
		tok := &m.tokens[idx]
		if p < offset || (tok.SingleWord && !isSingleWord(text, p, end)) {
			// The search resumes after a discarded match, as an
			// Aho-Corasick iteration does.
			p = end - 1
			continue
		}
		start, stop := p, end
		if tok.LStrip {
			start = max(trimSpaceRight(text, p), offset)
		}
		if tok.RStrip {
			stop = trimSpaceLeft(text, end)
		}
		return addedMatch{start: start, stop: stop, resume: end, id: tok.ID}, true
	}
	return addedMatch{}, false
}

// isSingleWord reports whether text[p:end] has no word character right
// before or after it.
func isSingleWord(text string, p, end int) bool {
	if p > 0 {
		if r, _ := utf8.DecodeLastRuneInString(text[:p]); isWordChar(r) {
			return false
		}
	}
	if end < len(text) {
		if r, _ := utf8.DecodeRuneInString(text[end:]); isWordChar(r) {
			return false
		}
	}
	return true
}

// trimSpaceRight returns the start of the white space that ends at text[p].
func trimSpaceRight(text string, p int) int {
	for p > 0 {
		r, n := utf8.DecodeLastRuneInString(text[:p])
		if classOf(r)&classSpace == 0 {
			break
		}
		p -= n
	}
	return p
}

// trimSpaceLeft returns the end of the white space that starts at text[p].
func trimSpaceLeft(text string, p int) int {
	for p < len(text) {
		r, n := decodeAt(text, p)
		if classOf(r)&classSpace == 0 {
			break
		}
		p += n
	}
	return p
}
