package grammar

// Costs: how many bytes, at least, finish a value or a document. Every
// byte is a token of the vocabularies this package serves (byte-level
// BPE), so a document whose finishing cost is c can be finished in c
// tokens; Matcher.SetBudget uses that to close documents before
// max_tokens instead of cutting them.

const infBytes = int32(1 << 30)

func satAdd(a, b int32) int32 { return min(int64ToInt32(int64(a)+int64(b)), infBytes) }

func satMul(a, b int32) int32 { return min(int64ToInt32(int64(a)*int64(b)), infBytes) }

func int64ToInt32(v int64) int32 {
	if v > int64(infBytes) {
		return infBytes
	}
	return int32(v)
}

// costs computes minBytes and reqCost for every node (a fixpoint, as
// recursion through $ref needs) and returns maxOpen: a bound on how much
// one byte can raise the cost of finishing (by opening an optional value
// or a costlier alternative).
func (c *compiler) costs() int32 {
	for _, n := range c.nodes {
		n.minBytes = infBytes
	}
	for changed := true; changed; {
		changed = false
		for _, n := range c.nodes {
			b := nodeBytes(n)
			if b < n.minBytes {
				n.minBytes = b
				changed = true
			}
		}
	}
	maxOpen := int32(8)
	for _, n := range c.nodes {
		if n.kind == kObject {
			n.reqCost = make([]int32, len(n.props)+1)
			for i := len(n.props) - 1; i >= 0; i-- {
				n.reqCost[i] = n.reqCost[i+1]
				if n.props[i].required {
					n.reqCost[i] = satAdd(n.reqCost[i], satAdd(int32(len(n.props[i].key))+1, n.props[i].val.minBytes))
				}
			}
		}
		if n.minBytes < infBytes {
			maxOpen = max(maxOpen, satAdd(n.minBytes, 8))
		}
		for _, p := range n.props {
			if v := satAdd(int32(len(p.key)), p.val.minBytes); v < infBytes {
				maxOpen = max(maxOpen, satAdd(v, 8))
			}
		}
	}
	return maxOpen
}

func nodeBytes(n *node) int32 {
	switch n.kind {
	case kLit:
		return int32(len(n.lit))
	case kString:
		if n.dfa != nil {
			return 2 + n.dfa.bdist[0]
		}
		return 2 + int32(n.minLen)
	case kNumber:
		if n.dfa != nil {
			return n.dfa.bdist[0]
		}
		return 1
	case kRaw:
		return max(n.dfa.bdist[0], int32(n.minLen))
	case kAlt:
		b := infBytes
		for _, a := range n.flat {
			b = min(b, a.minBytes)
		}
		return b
	case kObject:
		b, req := int32(2), int32(0)
		for _, p := range n.props {
			if p.required {
				b = satAdd(b, satAdd(int32(len(p.key)), p.val.minBytes))
				req++
			}
		}
		return satAdd(b, max(req-1, 0))
	case kArray:
		if n.minItems == 0 {
			return 2
		}
		return satAdd(1, itemsCost(n, 0)) // [, the items with their commas (one too many), ]
	case kSeq:
		one := int32(0)
		for _, p := range n.parts {
			one = satAdd(one, p.minBytes)
		}
		b := satMul(int32(n.minRep), one)
		if n.sep != nil && n.minRep > 1 {
			b = satAdd(b, satMul(int32(n.minRep-1), n.sep.minBytes))
		}
		return b
	}
	return infBytes
}

// frameCost is the bytes needed to finish the value of frame f (not its
// parents).
func frameCost(f frame) int32 {
	n := f.n
	if n == nil {
		return 0
	}
	switch n.kind {
	case kLit:
		return int32(len(n.lit)) - f.a
	case kString:
		need := max(int32(n.minLen)-f.a, 0) + 1 // characters still required, and the quote
		switch f.st {
		case sStart:
			return n.minBytes
		case sPat:
			return n.dfa.bdist[f.b] + 1
		case sIn:
			return need
		case sEsc:
			return 1 + need
		case sHex:
			return 4 - f.b + need
		case sCont:
			return f.b + need
		case sE0, sED:
			return 2 + need
		case sF0, sF4:
			return 3 + need
		}
	case kNumber:
		if n.dfa != nil {
			return n.dfa.bdist[f.b]
		}
		if numAccepting(f.st) {
			return 0
		}
		return 1
	case kArray:
		switch f.st {
		case aStart:
			return n.minBytes
		case aFirst:
			if n.minItems == 0 {
				return 1
			}
			return itemsCost(n, 0) // items, commas between, and ]
		case aNext:
			return satAdd(itemsCost(n, int(f.a)), 1)
		case aItem:
			// One more item at least (the comma is read), then ].
			if int(f.a) >= n.minItems {
				return satAdd(n.itemAt(int(f.a)).minBytes, 1)
			}
			return itemsCost(n, int(f.a))
		}
	case kObject:
		switch f.st {
		case oStart:
			return n.minBytes
		case oNext:
			return satAdd(n.reqCost[f.a], 1)
		case oFirst, oKey:
			if n.mapVal != nil {
				if f.st == oFirst {
					return 1
				}
				return satAdd(4, n.mapVal.minBytes) // "":v}
			}
			if n.nextReq[f.a] < len(n.props) {
				return n.reqCost[f.a] // the first needs no comma; plus }
			}
			if f.st == oFirst {
				return 1
			}
			best := infBytes
			for _, p := range n.props[f.a:] {
				best = min(best, satAdd(int32(len(p.key)), p.val.minBytes))
			}
			return satAdd(best, 1)
		case oInKey:
			p := n.props[f.a]
			return satAdd(satAdd(int32(len(p.key))-f.b, p.val.minBytes), satAdd(n.reqCost[f.a+1], 1))
		case oColon:
			return satAdd(2, n.mapVal.minBytes)
		}
	case kRaw:
		return max(n.dfa.bdist[f.b], int32(n.minLen)-f.a)
	case kSeq:
		if f.a == 0 && f.b == 0 && f.st == 0 && n.minRep == 0 {
			return 0 // optional, not started
		}
		one, rest := int32(0), int32(0)
		for i, p := range n.parts {
			one = satAdd(one, p.minBytes)
			if i >= int(f.a) {
				rest = satAdd(rest, p.minBytes)
			}
		}
		sep := int32(0)
		if n.sep != nil {
			sep = n.sep.minBytes
		}
		if f.a == 0 && f.b > 0 && f.st == 0 {
			rest = satAdd(rest, sep)
		}
		if more := int32(n.minRep) - f.b - 1; more > 0 {
			rest = satAdd(rest, satMul(more, satAdd(one, sep)))
		}
		return rest
	}
	return infBytes
}

// threadCost is the bytes needed to finish t's document.
func threadCost(t thread) int32 {
	c := frameCost(t.top)
	if t.rest != nil {
		c = satAdd(c, t.rest.cost)
	}
	return c
}

func minCost(ts []thread) int32 {
	c := infBytes
	for _, t := range ts {
		c = min(c, threadCost(t))
	}
	return c
}

// Remaining returns the fewest bytes (so tokens, at most) that finish the
// document from the current state.
func (m *Matcher) Remaining() int {
	if m.ended {
		return 0
	}
	return int(minCost(m.threads))
}

// SetBudget tells the matcher how many tokens may still be generated,
// the next one included (n < 0: no limit). Mask then allows only tokens
// after which the document can still be finished within the budget, so a
// generation that ends at its token limit still ends with a whole document
// (when the budget allowed one at all).
func (m *Matcher) SetBudget(n int) { m.budget = n }

// itemsCost is the bytes of the required items from index from on, each
// with one separator byte.
func itemsCost(n *node, from int) int32 {
	c := int32(0)
	for i := from; i < n.minItems; i++ {
		if i >= len(n.prefix) {
			return satAdd(c, satMul(int32(n.minItems-i), satAdd(n.items.minBytes, 1)))
		}
		c = satAdd(c, satAdd(n.prefix[i].minBytes, 1))
	}
	return c
}
