package grammar

import (
	"errors"
	"fmt"

	"fusion/engine/sample"
)

// frame is one open value on a thread's stack. Its meaning of st, a and b
// depends on the node kind (see the step functions).
type frame struct {
	n  *node
	st uint8
	a  int32
	b  int32
}

// stack holds a thread's parent frames. Stacks are immutable and shared.
type stack struct {
	f    frame
	next *stack
	cost int32 // bytes needed to finish f and every frame below it
}

// pushFrame returns the stack of f above next.
func pushFrame(f frame, next *stack) *stack {
	c := frameCost(f)
	if next != nil {
		c = satAdd(c, next.cost)
	}
	return &stack{f: f, next: next, cost: c}
}

// thread is one path of the nondeterministic automaton: the top frame by
// value (so bytes inside a value allocate nothing) and its parents. A thread
// whose top.n is nil has finished the document.
type thread struct {
	top    frame
	rest   *stack
	depth  int32
	values int32 // values started so far in the document
}

// keyNode is the string node of free-form object keys.
var keyNode = func() *node {
	n := &node{kind: kString, maxLen: MaxStringLength, minDepth: 1}
	n.flat = []*node{n}
	return n
}()

// Matcher is the per-request state of a Grammar: the set of live threads.
// It is not safe for concurrent use.
type Matcher struct {
	threads []thread
	bufs    [][]thread // per trie depth, reused by Mask
	ended   bool       // EOS accepted
	budget  int        // tokens left for the document, or -1 (see SetBudget)
	filter  bool       // Mask: drop tokens whose cost exceeds limit
	limit   int32
	// maxTokLen is the vocabulary's longest token, for the walk.
	maxTokLen int
	maxOpen   int32 // the most one byte can add to the cost of finishing

	strKey   strKey        // the string state strBits was walked for
	strBits  sample.Bitset // unsafe tokens allowed there (see walkStrRest)
	strCosts []tokenCost   // the same tokens with their cost of finishing
	collect  bool          // walk: record costs in strCosts too
}

// tokenCost is a token allowed from a string state and the bytes that
// finish the document after it.
type tokenCost struct {
	id   int32
	cost int32
}

// State is a snapshot of a Matcher, for Restore.
type State struct {
	threads []thread
	ended   bool
}

// NewMatcher returns a matcher at the start of a document.
func (g *Grammar) NewMatcher() *Matcher {
	m := &Matcher{budget: -1, maxOpen: g.maxOpen}
	m.threads = expand(nil, thread{}, g.root, false)
	return m
}

// expand appends to out a thread for each concrete node n stands for, with
// it as the new top above parent (or as the root when !push), pruning those
// that could not finish within MaxDepth. Once the document has MaxValues
// values, only the alternatives that finish with the least nesting are kept,
// so required values shrink down to leaves.
func expand(out []thread, parent thread, n *node, push bool) []thread {
	var rest *stack
	depth := int32(1)
	if push {
		rest = pushFrame(parent.top, parent.rest)
		depth = parent.depth + 1
	}
	spent := parent.values >= MaxValues
	for _, c := range n.flat {
		if int(depth)-1+c.minDepth > MaxDepth || spent && c.minDepth > n.minDepth {
			continue
		}
		out = append(out, thread{top: frame{n: c}, rest: rest, depth: depth, values: parent.values + 1})
	}
	return out
}

// pop finishes the top value and resumes its parent.
func pop(t thread) thread {
	if t.rest == nil {
		return thread{}
	}
	return thread{top: t.rest.f, rest: t.rest.next, depth: t.depth - 1, values: t.values}
}

// fits reports whether an optional value of n may be pushed above t: the
// value budget is not spent and it can be finished within MaxDepth.
func fits(t thread, n *node) bool {
	return t.values < MaxValues && int(t.depth)+n.minDepth <= MaxDepth
}

// complete reports whether t has produced a whole document.
func complete(t thread) bool {
	for {
		if t.top.n == nil {
			return true
		}
		if !finishable(t.top) {
			return false
		}
		if t.rest == nil {
			return true
		}
		t = pop(t)
	}
}

// finishable reports whether frame f may end here, without more bytes:
// a number or raw string its automaton accepts, a sequence with its
// repetitions done (or an optional one not started).
func finishable(f frame) bool {
	switch n := f.n; n.kind {
	case kNumber:
		if n.dfa != nil {
			return n.dfa.accept[f.b]
		}
		return numAccepting(f.st)
	case kRaw:
		return n.dfa.accept[f.b] && int(f.a) >= n.minLen
	case kSeq:
		if n.minRep == 0 && f.a == 0 && f.b == 0 && f.st == 0 {
			return true
		}
		return int(f.a) == len(n.parts) && int(f.b)+1 >= n.minRep
	}
	return false
}

// Object states.
const (
	oStart = iota // expect {
	oFirst        // after {: } or a key
	oNext         // after a value: } or ,
	oKey          // after ,: a key
	oInKey        // inside props[a].key at byte b
	oColon        // free key read: expect : (a bare free key's frame sits above)
)

// Array states.
const (
	aStart = iota // expect [
	aFirst        // after [: ] or an item
	aNext         // after an item: ] or ,
	aItem         // after ,: an item
)

// String states.
const (
	sStart = iota
	sIn
	sEsc
	sHex  // b hex digits of \u read
	sCont // b continuation bytes (80-BF) to go
	sE0   // then A0-BF, 1 more
	sED   // then 80-9F, 1 more
	sF0   // then 90-BF, 2 more
	sF4   // then 80-8F, 2 more
	sPat  // in a string with a pattern: b is the DFA state
)

// Number states.
const (
	nStart = iota
	nMinus
	nZero
	nInt
	nDot
	nFrac
	nE
	nESign
	nExp
)

func numAccepting(st uint8) bool {
	return st == nZero || st == nInt || st == nFrac || st == nExp
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// step appends to out the threads t becomes on byte b.
func step(t thread, b byte, out []thread) []thread {
	f := &t.top
	n := f.n
	if n == nil {
		return out
	}
	switch n.kind {
	case kLit:
		if n.lit[f.a] != b {
			return out
		}
		f.a++
		if int(f.a) == len(n.lit) {
			return append(out, pop(t))
		}
		return append(out, t)

	case kString:
		return stepString(t, b, out)

	case kSeq:
		return stepSeq(t, b, out)

	case kRaw:
		return stepRaw(t, b, out)

	case kNumber:
		if n.dfa != nil {
			// Bounded: the DFA of the allowed numbers, state in b.
			if next := n.dfa.next[f.b][b]; next >= 0 {
				f.b = next
				return append(out, t)
			}
			if n.dfa.accept[f.b] && t.rest != nil {
				return step(pop(t), b, out)
			}
			return out
		}
		if stepNumber(f, b) {
			return append(out, t)
		}
		if numAccepting(f.st) && t.rest != nil {
			return step(pop(t), b, out)
		}
		return out

	case kArray:
		switch f.st {
		case aStart:
			if b == '[' {
				f.st = aFirst
				return append(out, t)
			}
		case aFirst, aItem:
			if b == ']' && f.st == aFirst && n.minItems == 0 {
				return append(out, pop(t))
			}
			if n.maxItems >= 0 && int(f.a) >= n.maxItems {
				return out
			}
			item := n.itemAt(int(f.a))
			if f.st == aFirst && n.minItems == 0 && !fits(t, item) {
				return out
			}
			f.st = aNext
			f.a++
			return stepNew(t, item, b, out)
		case aNext:
			if b == ']' && int(f.a) >= n.minItems {
				return append(out, pop(t))
			}
			if b == ',' && (n.maxItems < 0 || int(f.a) < n.maxItems) && (int(f.a) < n.minItems || fits(t, n.itemAt(int(f.a)))) {
				f.st = aItem
				return append(out, t)
			}
		}
		return out

	case kObject:
		switch f.st {
		case oStart:
			if b == '{' {
				f.st = oFirst
				return append(out, t)
			}
		case oFirst, oNext:
			if b == '}' && n.nextReq[f.a] == len(n.props) {
				return append(out, pop(t))
			}
			if f.st == oFirst {
				return stepKeyStart(t, b, out)
			}
			if b == ',' && hasKey(t) {
				f.st = oKey
				return append(out, t)
			}
		case oKey:
			return stepKeyStart(t, b, out)
		case oInKey:
			key := n.props[f.a].key
			if key[f.b] != b {
				return out
			}
			f.b++
			if int(f.b) < len(key) {
				return append(out, t)
			}
			val := n.props[f.a].val
			f.st, f.a, f.b = oNext, f.a+1, 0
			return expand(out, t, val, true)
		case oColon:
			if b == ':' {
				f.st = oNext
				return expand(out, t, n.mapVal, true)
			}
		}
		return out
	}
	return out
}

// stepSeq advances a sequence frame: a is the index of the next part, b
// the repetitions completed, st 1 once the separator of the current
// repetition has been read.
func stepSeq(t thread, b byte, out []thread) []thread {
	f := &t.top
	n := f.n
	if int(f.a) == len(n.parts) {
		reps := f.b + 1
		if (n.maxRep < 0 || int(reps) < n.maxRep) && (int(reps) < n.minRep || t.values < MaxValues) {
			u := t
			u.top.a, u.top.b, u.top.st = 0, reps, 0
			out = stepSeq(u, b, out)
		}
		if int(reps) >= n.minRep && t.rest != nil {
			out = step(pop(t), b, out)
		}
		return out
	}
	if f.a == 0 && f.b == 0 && f.st == 0 && n.minRep == 0 {
		// Optional and not started: skip it, or start it if the value
		// budget allows.
		if t.rest != nil {
			out = step(pop(t), b, out)
		}
		if t.values >= MaxValues {
			return out
		}
	}
	if f.a == 0 && f.b > 0 && n.sep != nil && f.st == 0 {
		f.st = 1
		return stepNew(t, n.sep, b, out)
	}
	f.a++
	return stepNew(t, n.parts[f.a-1], b, out)
}

// stepRaw advances a raw string: its DFA state in b, code points in a. It
// ends where its DFA accepts and the parent takes the byte.
func stepRaw(t thread, b byte, out []thread) []thread {
	f := t.top
	n := f.n
	d := n.dfa
	if next := d.next[f.b][b]; next >= 0 {
		u := t
		if b&0xC0 != 0x80 {
			u.top.a++
		}
		if int(u.top.a)+int(d.dist[next]) <= n.maxLen {
			u.top.b = next
			out = append(out, u)
		}
	}
	if d.accept[f.b] && int(f.a) >= n.minLen && t.rest != nil {
		out = step(pop(t), b, out)
	}
	return out
}

// stepKeyStart handles the first byte of a key in an object frame.
func stepKeyStart(t thread, b byte, out []thread) []thread {
	n := t.top.n
	if n.mapVal != nil && n.freeKey != nil {
		if !fits(t, n.mapVal) {
			return out
		}
		t.top.st = oColon
		return stepNew(t, n.freeKey, b, out)
	}
	if b != '"' && n.mapVal != nil {
		return out
	}
	if n.mapVal != nil {
		if !fits(t, n.mapVal) {
			return out
		}
		t.top.st = oColon
		rest := pushFrame(t.top, t.rest)
		return append(out, thread{top: frame{n: keyNode, st: sIn}, rest: rest, depth: t.depth + 1, values: t.values})
	}
	last := min(n.nextReq[t.top.a], len(n.props)-1)
	for k := int(t.top.a); k <= last; k++ {
		if n.props[k].key[0] != b || !n.props[k].required && !fits(t, n.props[k].val) {
			continue
		}
		u := t
		u.top.st, u.top.a, u.top.b = oInKey, int32(k), 1
		out = append(out, u)
	}
	return out
}

// hasKey reports whether an object frame can take another key.
func hasKey(t thread) bool {
	n := t.top.n
	if n.mapVal != nil {
		return fits(t, n.mapVal)
	}
	if int(t.top.a) >= len(n.props) {
		return false
	}
	if n.nextReq[t.top.a] < len(n.props) {
		return true
	}
	for _, p := range n.props[t.top.a:] {
		if fits(t, p.val) {
			return true
		}
	}
	return false
}

// stepNew pushes a value of n above t and feeds it b.
func stepNew(t thread, n *node, b byte, out []thread) []thread {
	var tmp [8]thread
	for _, u := range expand(tmp[:0], t, n, true) {
		out = step(u, b, out)
	}
	return out
}

func stepString(t thread, b byte, out []thread) []thread {
	f := &t.top
	n := f.n
	switch f.st {
	case sStart:
		if b != '"' {
			return out
		}
		f.st = sIn
		if n.dfa != nil {
			f.st, f.b = sPat, 0
		}
	case sPat:
		d := n.dfa
		if b == '"' {
			if !d.accept[f.b] || int(f.a) < n.minLen {
				return out
			}
			return append(out, pop(t))
		}
		next := d.next[f.b][b]
		if next < 0 {
			return out
		}
		if b&0xC0 != 0x80 {
			f.a++
		}
		if int(f.a)+int(d.dist[next]) > n.maxLen {
			return out
		}
		f.b = next
	case sIn:
		switch {
		case b == '"':
			if int(f.a) < n.minLen {
				return out
			}
			return append(out, pop(t))
		case int(f.a) >= n.maxLen || b < 0x20:
			return out
		case b == '\\':
			f.st = sEsc
		case b < 0x80:
		case b >= 0xC2 && b <= 0xDF:
			f.st, f.b = sCont, 1
		case b == 0xE0:
			f.st = sE0
		case b == 0xED:
			f.st = sED
		case b >= 0xE1 && b <= 0xEF:
			f.st, f.b = sCont, 2
		case b == 0xF0:
			f.st = sF0
		case b >= 0xF1 && b <= 0xF3:
			f.st, f.b = sCont, 3
		case b == 0xF4:
			f.st = sF4
		default:
			return out
		}
		f.a++
	case sEsc:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.st = sIn
		case 'u':
			f.st, f.b = sHex, 0
		default:
			return out
		}
	case sHex:
		switch {
		case isDigit(b), b >= 'a' && b <= 'f', b >= 'A' && b <= 'F':
		default:
			return out
		}
		if f.b == 0 && (b == 'd' || b == 'D') {
			return out // no surrogates
		}
		f.b++
		if f.b == 4 {
			f.st = sIn
		}
	case sCont:
		if b < 0x80 || b > 0xBF {
			return out
		}
		f.b--
		if f.b == 0 {
			f.st = sIn
		}
	case sE0, sED, sF0, sF4:
		lo, hi, more := byte(0x80), byte(0xBF), int32(1)
		switch f.st {
		case sE0:
			lo = 0xA0
		case sED:
			hi = 0x9F
		case sF0:
			lo, more = 0x90, 2
		case sF4:
			hi, more = 0x8F, 2
		}
		if b < lo || b > hi {
			return out
		}
		f.st, f.b = sCont, more
	}
	return append(out, t)
}

// stepNumber advances a number frame; false if b does not extend it.
func stepNumber(f *frame, b byte) bool {
	d := isDigit(b)
	frac := !f.n.integer
	switch f.st {
	case nStart, nMinus:
		switch {
		case b == '-' && f.st == nStart:
			f.st = nMinus
		case b == '0':
			f.st = nZero
		case d:
			f.st, f.a = nInt, 1
		default:
			return false
		}
	case nZero, nInt, nFrac, nExp:
		switch {
		case d && f.st == nInt && f.a < MaxIntDigits,
			d && f.st == nFrac && f.a < MaxFracDigits,
			d && f.st == nExp && f.a < MaxExpDigits:
			f.a++
		case b == '.' && frac && (f.st == nZero || f.st == nInt):
			f.st = nDot
		case (b == 'e' || b == 'E') && frac && f.st != nExp:
			f.st = nE
		default:
			return false
		}
	case nDot:
		if !d {
			return false
		}
		f.st, f.a = nFrac, 1
	case nE:
		switch {
		case b == '+' || b == '-':
			f.st = nESign
		case d:
			f.st, f.a = nExp, 1
		default:
			return false
		}
	case nESign:
		if !d {
			return false
		}
		f.st, f.a = nExp, 1
	}
	return true
}

// advance appends to out the threads of ts after byte b, without duplicates.
func advance(ts []thread, b byte, out []thread) []thread {
	for _, t := range ts {
		start := len(out)
		out = step(t, b, out)
		// Drop threads equal to ones already present.
		for i := start; i < len(out); i++ {
			for j := 0; j < start; j++ {
				if out[j] == out[i] {
					out = append(out[:i], out[i+1:]...)
					i--
					break
				}
			}
		}
	}
	return out
}

// Advance feeds one byte; it reports false, leaving the state unchanged, if
// the grammar does not allow it.
func (m *Matcher) Advance(b byte) bool {
	if m.ended {
		return false
	}
	next := advance(m.threads, b, nil)
	if len(next) == 0 {
		return false
	}
	m.threads = next
	return true
}

// AdvanceBytes feeds bytes; on a rejected byte it restores the state and
// returns the offset of that byte.
func (m *Matcher) AdvanceBytes(p []byte) (int, bool) {
	saved := m.Snapshot()
	for i, b := range p {
		if !m.Advance(b) {
			m.Restore(saved)
			return i, false
		}
	}
	return len(p), true
}

// Done reports whether a whole document has been produced, so that EOS is
// allowed. (A number at the top level may still be extended.)
func (m *Matcher) Done() bool {
	for _, t := range m.threads {
		if complete(t) {
			return true
		}
	}
	return false
}

// Ended reports whether EOS was accepted.
func (m *Matcher) Ended() bool { return m.ended }

// Clone returns an independent copy.
func (m *Matcher) Clone() *Matcher {
	return &Matcher{threads: append([]thread(nil), m.threads...), ended: m.ended, budget: m.budget, maxOpen: m.maxOpen}
}

// Snapshot returns the current state; threads share immutable stacks, so this
// copies only the live thread headers.
func (m *Matcher) Snapshot() State {
	return State{threads: append([]thread(nil), m.threads...), ended: m.ended}
}

// Restore returns to a snapshot.
func (m *Matcher) Restore(s State) {
	m.threads = append(m.threads[:0:0], s.threads...)
	m.ended = s.ended
}

// ErrRejected is returned by Accept for a token the grammar does not allow.
var ErrRejected = errors.New("grammar: token not allowed")

// Accept advances the state by a token's bytes (or ends it on EOS).
func (m *Matcher) Accept(v *Vocab, id int) error {
	if m.ended {
		return fmt.Errorf("%w: %d after EOS", ErrRejected, id)
	}
	if v.isEOS(id) {
		if !m.Done() {
			return fmt.Errorf("%w: EOS before the document is complete", ErrRejected)
		}
		m.ended = true
		return nil
	}
	if id < 0 || id >= len(v.tokens) || len(v.tokens[id]) == 0 {
		return fmt.Errorf("%w: %d is not a maskable token", ErrRejected, id)
	}
	if at, ok := m.AdvanceBytes(v.tokens[id]); !ok {
		return fmt.Errorf("%w: token %d (%q) at byte %d", ErrRejected, id, v.tokens[id], at)
	}
	return nil
}
