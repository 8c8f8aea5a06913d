package sample

import (
	"math"
	"math/bits"
)

// Mask restricts the tokens one step may produce, for constrained decoding
// (grammars, JSON schemas). It is applied before every other transform:
// a token it rejects is never sampled and has log-probability -Inf.
type Mask interface {
	Allowed(id int) bool
}

// MaskFunc adapts a function to Mask.
type MaskFunc func(id int) bool

// Allowed calls f.
func (f MaskFunc) Allowed(id int) bool { return f(id) }

// Bitset is a Mask with one bit per token id, set for allowed tokens. Ids
// past its end are not allowed. The sampler reads it a word at a time.
type Bitset []uint64

// NewBitset returns an empty Bitset (nothing allowed) for n token ids.
func NewBitset(n int) Bitset { return make(Bitset, (n+63)/64) }

// Set allows id.
func (b Bitset) Set(id int) { b[id/64] |= 1 << (id % 64) }

// Allowed reports whether id is allowed.
func (b Bitset) Allowed(id int) bool {
	w := id / 64
	return id >= 0 && w < len(b) && b[w]&(1<<(id%64)) != 0
}

var negInf = float32(math.Inf(-1))

// applyMask sets the logits of the tokens m rejects to -Inf. The sampler
// calls it on its own scratch row only, so it runs uninstrumented.
//
//go:norace
func applyMask(logits []float32, m Mask) {
	b, ok := m.(Bitset)
	if !ok {
		for id := range logits {
			if !m.Allowed(id) {
				logits[id] = negInf
			}
		}
		return
	}
	for w := 0; w*64 < len(logits); w++ {
		var word uint64
		if w < len(b) {
			word = b[w]
		}
		row := logits[w*64 : min(w*64+64, len(logits))]
		switch word {
		case math.MaxUint64:
		case 0:
			for i := range row {
				row[i] = negInf
			}
		default:
			for z := ^word; z != 0; z &= z - 1 {
				i := bits.TrailingZeros64(z)
				if i >= len(row) {
					break
				}
				row[i] = negInf
			}
		}
	}
}
