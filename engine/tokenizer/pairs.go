package tokenizer

// pairTable maps a pair of token ids to the rank of their merge and the id
// of the merged token. It is an open-addressing hash table, built once and
// only read afterwards; lookups are the hot loop of BPE, so a key and its
// value share a cache line.
type pairTable struct {
	entries []pairEntry
	shift   uint
}

type pairEntry struct {
	key uint64 // left<<32 | right, or emptyPair
	val uint64 // rank<<32 | merged id
}

const emptyPair = ^uint64(0)

func newPairTable(n int) *pairTable {
	size, shift := 8, uint(61)
	for size < 2*n {
		size *= 2
		shift--
	}
	t := &pairTable{entries: make([]pairEntry, size), shift: shift}
	for i := range t.entries {
		t.entries[i].key = emptyPair
	}
	return t
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

func (t *pairTable) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

// put sets the merge of a pair, replacing an earlier one.
func (t *pairTable) put(left, right int32, rank, merged int32) {
	key := pairKey(left, right)
	mask := uint64(len(t.entries) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		e := &t.entries[i]
		if e.key == emptyPair || e.key == key {
			e.key = key
			e.val = uint64(uint32(rank))<<32 | uint64(uint32(merged))
			return
		}
	}
}

// get returns the rank and merged id of a pair.
func (t *pairTable) get(left, right int32) (rank, merged int32, ok bool) {
	key := pairKey(left, right)
	mask := uint64(len(t.entries) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		e := &t.entries[i]
		switch e.key {
		case key:
			return int32(e.val >> 32), int32(uint32(e.val)), true
		case emptyPair:
			return 0, 0, false
		}
	}
}
