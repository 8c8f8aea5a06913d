package grammar

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The pattern subset: literals, ., character classes [...] of ASCII
// characters and ranges (negated too), \d \w \s \D \W \S, escaped
// punctuation, groups (...) and (?:...), alternation |, quantifiers * + ?
// {n} {n,} {n,m} (m <= maxRepeat; lazy forms are treated as greedy), and ^
// at the start / $ at the end. Unanchored ends match anything, as in JSON
// Schema. It compiles to a DFA over the raw bytes of the string content:
// characters that JSON must escape (control characters, " and \) are never
// produced, and . or negated classes produce any valid UTF-8 character but
// those.

const (
	maxRepeat    = 64
	maxDFAStates = 4096
)

// dfa is a deterministic automaton over string-content bytes.
type dfa struct {
	next   [][256]int32 // -1: reject
	accept []bool
	dist   []int32 // fewest code points still needed to reach acceptance
	bdist  []int32 // fewest bytes still needed to reach acceptance
}

type rkind uint8

const (
	rClass rkind = iota // one character from a set
	rLit                // a literal UTF-8 sequence
	rCat
	rAlt
	rRep
)

type rnode struct {
	kind     rkind
	ascii    [2]uint64 // rClass: ASCII members
	nonASCII bool      // rClass: every non-ASCII character
	lit      []byte
	subs     []*rnode
	min, max int // rRep; max -1: unbounded
}

type rparser struct {
	s   string
	pos int
}

var errPattern = errors.New("unsupported pattern syntax")

func parseRegex(s string) (*rnode, bool, bool, error) {
	p := &rparser{s: s}
	start := p.eat('^')
	n, err := p.alt()
	if err != nil {
		return nil, false, false, err
	}
	end := false
	if p.pos < len(p.s) && p.s[p.pos] == '$' && p.pos == len(p.s)-1 {
		end = true
		p.pos++
	}
	if p.pos != len(p.s) {
		return nil, false, false, fmt.Errorf("%w at offset %d", errPattern, p.pos)
	}
	return n, start, end, nil
}

func (p *rparser) eat(c byte) bool {
	if p.pos < len(p.s) && p.s[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *rparser) alt() (*rnode, error) {
	var subs []*rnode
	for {
		n, err := p.cat()
		if err != nil {
			return nil, err
		}
		subs = append(subs, n)
		if !p.eat('|') {
			break
		}
	}
	if len(subs) == 1 {
		return subs[0], nil
	}
	return &rnode{kind: rAlt, subs: subs}, nil
}

func (p *rparser) cat() (*rnode, error) {
	n := &rnode{kind: rCat}
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '|' || c == ')' || c == '$' && p.pos == len(p.s)-1 {
			break
		}
		a, err := p.atom()
		if err != nil {
			return nil, err
		}
		if a, err = p.quant(a); err != nil {
			return nil, err
		}
		n.subs = append(n.subs, a)
	}
	return n, nil
}

func (p *rparser) quant(a *rnode) (*rnode, error) {
	for p.pos < len(p.s) {
		min, max := 0, 0
		switch p.s[p.pos] {
		case '*':
			min, max = 0, -1
			p.pos++
		case '+':
			min, max = 1, -1
			p.pos++
		case '?':
			min, max = 0, 1
			p.pos++
		case '{':
			end := p.pos + 1
			for end < len(p.s) && p.s[end] != '}' {
				end++
			}
			if end == len(p.s) {
				return nil, fmt.Errorf("%w: unclosed {", errPattern)
			}
			body := p.s[p.pos+1 : end]
			var err error
			lo, hi, comma := body, body, false
			for i := range body {
				if body[i] == ',' {
					lo, hi, comma = body[:i], body[i+1:], true
					break
				}
			}
			if min, err = strconv.Atoi(lo); err != nil {
				return nil, fmt.Errorf("%w: bad repetition {%s}", errPattern, body)
			}
			switch {
			case !comma:
				max = min
			case hi == "":
				max = -1
			default:
				if max, err = strconv.Atoi(hi); err != nil || max < min {
					return nil, fmt.Errorf("%w: bad repetition {%s}", errPattern, body)
				}
			}
			if min > maxRepeat || max > maxRepeat {
				return nil, fmt.Errorf("%w: repetition over %d", errPattern, maxRepeat)
			}
			p.pos = end + 1
		default:
			return a, nil
		}
		p.eat('?') // lazy: same language
		a = &rnode{kind: rRep, subs: []*rnode{a}, min: min, max: max}
	}
	return a, nil
}

func classOf(chars string) *rnode {
	n := &rnode{kind: rClass}
	for i := 0; i < len(chars); i++ {
		n.set(chars[i])
	}
	return n
}

func (n *rnode) set(c byte) { n.ascii[c/64] |= 1 << (c % 64) }

func (n *rnode) setRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		n.set(byte(c))
	}
}

func (n *rnode) negate() {
	n.ascii[0], n.ascii[1] = ^n.ascii[0], ^n.ascii[1]
	n.nonASCII = !n.nonASCII
}

func (n *rnode) merge(o *rnode) {
	n.ascii[0] |= o.ascii[0]
	n.ascii[1] |= o.ascii[1]
	n.nonASCII = n.nonASCII || o.nonASCII
}

const (
	digitChars = "0123456789"
	wordChars  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
	spaceChars = "\t\n\f\r "
)

// escape parses the character after a backslash.
func (p *rparser) escape() (*rnode, error) {
	if p.pos >= len(p.s) {
		return nil, fmt.Errorf("%w: trailing \\", errPattern)
	}
	c := p.s[p.pos]
	p.pos++
	var n *rnode
	switch c {
	case 'd', 'D':
		n = classOf(digitChars)
	case 'w', 'W':
		n = classOf(wordChars)
	case 's', 'S':
		n = classOf(spaceChars)
	case 't':
		return classOf("\t"), nil
	case 'n':
		return classOf("\n"), nil
	case 'r':
		return classOf("\r"), nil
	case 'f':
		return classOf("\f"), nil
	default:
		if c < 0x80 && !isAlnum(c) {
			return classOf(string(c)), nil
		}
		return nil, fmt.Errorf("%w: escape \\%c", errPattern, c)
	}
	if c >= 'A' && c <= 'Z' {
		n.negate()
	}
	return n, nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (p *rparser) atom() (*rnode, error) {
	c := p.s[p.pos]
	switch c {
	case '(':
		p.pos++
		if p.eat('?') {
			if !p.eat(':') {
				return nil, fmt.Errorf("%w: group flags", errPattern)
			}
		}
		n, err := p.alt()
		if err != nil {
			return nil, err
		}
		if !p.eat(')') {
			return nil, fmt.Errorf("%w: unclosed (", errPattern)
		}
		return n, nil
	case '[':
		p.pos++
		return p.class()
	case '.':
		p.pos++
		n := classOf("\n")
		n.negate()
		return n, nil
	case '\\':
		p.pos++
		return p.escape()
	case '*', '+', '?', '{', ')', '^', '$', ']', '}':
		return nil, fmt.Errorf("%w: unexpected %q at offset %d", errPattern, c, p.pos)
	}
	if c < 0x80 {
		p.pos++
		return classOf(string(c)), nil
	}
	r, size := utf8.DecodeRuneInString(p.s[p.pos:])
	if r == utf8.RuneError {
		return nil, fmt.Errorf("%w: invalid UTF-8", errPattern)
	}
	p.pos += size
	return &rnode{kind: rLit, lit: []byte(string(r))}, nil
}

func (p *rparser) class() (*rnode, error) {
	n := &rnode{kind: rClass}
	neg := p.eat('^')
	first := true
	for {
		if p.pos >= len(p.s) {
			return nil, fmt.Errorf("%w: unclosed [", errPattern)
		}
		c := p.s[p.pos]
		if c == ']' && !first {
			p.pos++
			break
		}
		first = false
		var lo byte
		if c == '\\' {
			p.pos++
			e, err := p.escape()
			if err != nil {
				return nil, err
			}
			if single, ok := e.single(); ok {
				lo = single
			} else {
				n.merge(e)
				continue
			}
		} else {
			if c >= 0x80 {
				return nil, fmt.Errorf("%w: non-ASCII in a class", errPattern)
			}
			p.pos++
			lo = c
		}
		if p.pos+1 < len(p.s) && p.s[p.pos] == '-' && p.s[p.pos+1] != ']' {
			hi := p.s[p.pos+1]
			if hi == '\\' || hi >= 0x80 || hi < lo {
				return nil, fmt.Errorf("%w: bad range", errPattern)
			}
			p.pos += 2
			n.setRange(lo, hi)
			continue
		}
		n.set(lo)
	}
	if neg {
		n.negate()
	}
	return n, nil
}

// single returns the only member of an ASCII class of one character.
func (n *rnode) single() (byte, bool) {
	if n.nonASCII {
		return 0, false
	}
	var c byte
	count := 0
	for i := 0; i < 128; i++ {
		if n.ascii[i/64]&(1<<(i%64)) != 0 {
			c = byte(i)
			count++
		}
	}
	return c, count == 1
}

// NFA construction (Thompson), over byte ranges.

type nfaEdge struct {
	lo, hi byte
	to     int
}

type nfa struct {
	eps   [][]int
	edges [][]nfaEdge
}

func (a *nfa) state() int {
	a.eps = append(a.eps, nil)
	a.edges = append(a.edges, nil)
	return len(a.eps) - 1
}

func (a *nfa) edge(from int, lo, hi byte, to int) {
	a.edges[from] = append(a.edges[from], nfaEdge{lo, hi, to})
}

// build adds n between from and a new state, which it returns.
func (a *nfa) build(n *rnode, from int) int {
	switch n.kind {
	case rClass:
		to := a.state()
		for c := 0x20; c < 0x80; c++ {
			if n.ascii[c/64]&(1<<(c%64)) != 0 && c != '"' && c != '\\' {
				a.edge(from, byte(c), byte(c), to)
			}
		}
		if n.nonASCII {
			a.utf8Multi(from, to)
		}
		return to
	case rLit:
		for _, b := range n.lit {
			to := a.state()
			a.edge(from, b, b, to)
			from = to
		}
		return from
	case rCat:
		for _, s := range n.subs {
			from = a.build(s, from)
		}
		return from
	case rAlt:
		to := a.state()
		for _, s := range n.subs {
			start := a.state()
			a.eps[from] = append(a.eps[from], start)
			end := a.build(s, start)
			a.eps[end] = append(a.eps[end], to)
		}
		return to
	case rRep:
		sub := n.subs[0]
		for range n.min {
			from = a.build(sub, from)
		}
		if n.max < 0 {
			loop := a.state()
			a.eps[from] = append(a.eps[from], loop)
			end := a.build(sub, loop)
			a.eps[end] = append(a.eps[end], loop)
			return loop
		}
		to := a.state()
		a.eps[from] = append(a.eps[from], to)
		for range n.max - n.min {
			from = a.build(sub, from)
			a.eps[from] = append(a.eps[from], to)
		}
		return to
	}
	panic("unreachable")
}

// utf8Multi adds every valid multi-byte UTF-8 character from from to to.
func (a *nfa) utf8Multi(from, to int) {
	c1, c2, c3 := a.state(), a.state(), a.state() // 1, 2, 3 continuation bytes to go
	a.edge(c1, 0x80, 0xBF, to)
	a.edge(c2, 0x80, 0xBF, c1)
	a.edge(c3, 0x80, 0xBF, c2)
	a.edge(from, 0xC2, 0xDF, c1)
	e0, ed, f0, f4 := a.state(), a.state(), a.state(), a.state()
	a.edge(from, 0xE0, 0xE0, e0)
	a.edge(e0, 0xA0, 0xBF, c1)
	a.edge(from, 0xE1, 0xEC, c2)
	a.edge(from, 0xED, 0xED, ed)
	a.edge(ed, 0x80, 0x9F, c1)
	a.edge(from, 0xEE, 0xEF, c2)
	a.edge(from, 0xF0, 0xF0, f0)
	a.edge(f0, 0x90, 0xBF, c2)
	a.edge(from, 0xF1, 0xF3, c3)
	a.edge(from, 0xF4, 0xF4, f4)
	a.edge(f4, 0x80, 0x8F, c2)
}

// compileRegex builds the DFA of the strings a JSON Schema pattern accepts.
func compileRegex(pattern string) (*dfa, error) {
	n, anchoredStart, anchoredEnd, err := parseRegex(pattern)
	if err != nil {
		return nil, err
	}
	any := &rnode{kind: rRep, subs: []*rnode{{kind: rClass, ascii: [2]uint64{^uint64(0), ^uint64(0)}, nonASCII: true}}, max: -1}
	if !anchoredStart {
		n = &rnode{kind: rCat, subs: []*rnode{any, n}}
	}
	if !anchoredEnd {
		n = &rnode{kind: rCat, subs: []*rnode{n, any}}
	}
	a := &nfa{}
	start := a.state()
	final := a.build(n, start)
	return determinize(a, start, final)
}

func determinize(a *nfa, start, final int) (*dfa, error) {
	closure := func(set []int) []int {
		seen := make(map[int]bool, len(set))
		stack := append([]int(nil), set...)
		var out []int
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] {
				continue
			}
			seen[s] = true
			out = append(out, s)
			stack = append(stack, a.eps[s]...)
		}
		slices.Sort(out)
		return out
	}
	key := func(set []int) string { return fmt.Sprint(set) }
	d := &dfa{}
	ids := map[string]int32{}
	var sets [][]int
	add := func(set []int) int32 {
		k := key(set)
		if id, ok := ids[k]; ok {
			return id
		}
		id := int32(len(sets))
		ids[k] = id
		sets = append(sets, set)
		var row [256]int32
		for i := range row {
			row[i] = -1
		}
		d.next = append(d.next, row)
		acc := false
		for _, s := range set {
			acc = acc || s == final
		}
		d.accept = append(d.accept, acc)
		return id
	}
	add(closure([]int{start}))
	for i := 0; i < len(sets); i++ {
		if len(sets) > maxDFAStates {
			return nil, fmt.Errorf("%w: more than %d automaton states", errPattern, maxDFAStates)
		}
		var targets [256][]int
		for _, s := range sets[i] {
			for _, e := range a.edges[s] {
				for c := int(e.lo); c <= int(e.hi); c++ {
					targets[c] = append(targets[c], e.to)
				}
			}
		}
		for c := range targets {
			if targets[c] != nil {
				d.next[i][c] = add(closure(targets[c]))
			}
		}
	}
	// dist by 0-1 BFS backwards from accepting states: continuation bytes
	// cost nothing, other bytes one code point.
	const inf = int32(1 << 30)
	d.dist = make([]int32, len(sets))
	rev := make([][]int32, len(sets))
	for s := range d.next {
		for c, t := range d.next[s] {
			if t >= 0 {
				rev[t] = append(rev[t], int32(s)<<8|int32(c))
			}
		}
	}
	var deque []int32
	for s := range d.dist {
		d.dist[s] = inf
		if d.accept[s] {
			d.dist[s] = 0
			deque = append(deque, int32(s))
		}
	}
	for len(deque) > 0 {
		t := deque[0]
		deque = deque[1:]
		for _, e := range rev[t] {
			s, c := e>>8, byte(e)
			w := int32(1)
			if c&0xC0 == 0x80 {
				w = 0
			}
			if d.dist[t]+w < d.dist[s] {
				d.dist[s] = d.dist[t] + w
				if w == 0 {
					deque = append([]int32{s}, deque...)
				} else {
					deque = append(deque, s)
				}
			}
		}
	}
	// bdist by BFS backwards: every byte counts.
	d.bdist = make([]int32, len(sets))
	var queue []int32
	for s := range d.bdist {
		d.bdist[s] = inf
		if d.accept[s] {
			d.bdist[s] = 0
			queue = append(queue, int32(s))
		}
	}
	for len(queue) > 0 {
		t := queue[0]
		queue = queue[1:]
		for _, e := range rev[t] {
			if s := e >> 8; d.bdist[s] == inf {
				d.bdist[s] = d.bdist[t] + 1
				queue = append(queue, s)
			}
		}
	}
	// Drop edges into states that cannot reach acceptance.
	for s := range d.next {
		for c, t := range d.next[s] {
			if t >= 0 && d.dist[t] >= inf {
				d.next[s][c] = -1
			}
		}
	}
	return d, nil
}
