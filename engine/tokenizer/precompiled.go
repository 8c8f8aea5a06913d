package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// This file is HF's Precompiled normalizer: the normalization rules of a
// SentencePiece model (XLM-R's nmt_nfkc: NFKC plus the removal of control
// characters and the mapping of odd spaces), compiled by SentencePiece into
// a "charsmap" — a darts-clone double-array trie over the UTF-8 bytes of
// the strings to replace, whose values point into a blob of
// NUL-terminated replacement strings.

// precompiledMap is a parsed charsmap.
type precompiledMap struct {
	trie       []uint32
	normalized string
}

// errCharsmap: a precompiled_charsmap that is not a well-formed charsmap.
var errCharsmap = errors.New("malformed precompiled_charsmap")

// parseCharsmap reads the layout SentencePiece writes: the trie's size in
// bytes (little-endian uint32), the trie's units (uint32 each), then the
// normalized strings.
func parseCharsmap(data []byte) (*precompiledMap, error) {
	if len(data) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", errCharsmap, len(data))
	}
	size := binary.LittleEndian.Uint32(data)
	if size%4 != 0 || uint64(size) > uint64(len(data)-4) || size == 0 {
		return nil, fmt.Errorf("%w: trie of %d bytes in %d", errCharsmap, size, len(data))
	}
	m := &precompiledMap{trie: make([]uint32, size/4)}
	for i := range m.trie {
		m.trie[i] = binary.LittleEndian.Uint32(data[4+4*i:])
	}
	rest := data[4+size:]
	if !utf8.Valid(rest) {
		return nil, fmt.Errorf("%w: the normalized strings are not UTF-8", errCharsmap)
	}
	m.normalized = string(rest)
	return m, nil
}

// Unit fields of a darts-clone double array.
func dartsHasLeaf(u uint32) bool { return (u>>8)&1 == 1 }
func dartsValue(u uint32) uint32 { return u & (1<<31 - 1) }
func dartsLabel(u uint32) uint32 { return u & (1<<31 | 0xFF) }
func dartsOffset(u uint32) uint32 {
	return (u >> 10) << ((u & (1 << 9)) >> 6)
}

// firstPrefix returns the value of the shortest prefix of key that is in
// the trie — as HF takes the first of the common-prefix matches, which is
// the shortest, not the longest.
func (m *precompiledMap) firstPrefix(key string) (uint32, bool) {
	pos := uint32(0)
	if len(m.trie) == 0 {
		return 0, false
	}
	pos ^= dartsOffset(m.trie[0])
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == 0 {
			break
		}
		pos ^= uint32(c)
		if pos >= uint32(len(m.trie)) {
			return 0, false
		}
		u := m.trie[pos]
		if dartsLabel(u) != uint32(c) {
			return 0, false
		}
		pos ^= dartsOffset(u)
		if pos >= uint32(len(m.trie)) {
			return 0, false
		}
		if dartsHasLeaf(u) {
			return dartsValue(m.trie[pos]), true
		}
	}
	return 0, false
}

// transform returns the replacement of chunk, if a prefix of it is in the
// trie: the NUL-terminated string at the prefix's value.
func (m *precompiledMap) transform(chunk string) (string, bool) {
	v, ok := m.firstPrefix(chunk)
	if !ok || int(v) > len(m.normalized) {
		return "", false
	}
	s := m.normalized[v:]
	if end := strings.IndexByte(s, 0); end >= 0 {
		s = s[:end]
	}
	return s, true
}

// normalize runs the charsmap over s as HF does: grapheme cluster by
// cluster (extended clusters), a cluster shorter than 6 bytes replaced
// whole when a prefix of it is in the trie, else each of its characters
// replaced on its own when it is in the trie.
func (m *precompiledMap) normalize(s string) string {
	var b strings.Builder
	modified := false
	state := -1
	for rest := s; rest != ""; {
		var g string
		g, rest, _, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if len(g) < 6 {
			if norm, ok := m.transform(g); ok {
				if !modified {
					b.Grow(len(s))
					b.WriteString(s[:len(s)-len(rest)-len(g)])
					modified = true
				}
				b.WriteString(norm)
				continue
			}
		}
		for i := 0; i < len(g); {
			_, size := utf8.DecodeRuneInString(g[i:])
			part := g[i : i+size]
			norm, ok := m.transform(part)
			if ok && !modified {
				b.Grow(len(s))
				b.WriteString(s[:len(s)-len(rest)-len(g)+i])
				modified = true
			}
			switch {
			case ok:
				b.WriteString(norm)
			case modified:
				b.WriteString(part)
			}
			i += size
		}
	}
	if !modified {
		return s
	}
	return b.String()
}

// precompiledNormalizer builds the normalizer of a Precompiled entry,
// whose charsmap is base64 in tokenizer.json.
func precompiledNormalizer(cfg normalizerJSON) (normalizer, error) {
	if cfg.PrecompiledCharsmap == nil {
		return nil, errors.New("Precompiled: missing precompiled_charsmap")
	}
	data, err := base64.StdEncoding.DecodeString(*cfg.PrecompiledCharsmap)
	if err != nil {
		return nil, fmt.Errorf("Precompiled: %w: %w", errCharsmap, err)
	}
	m, err := parseCharsmap(data)
	if err != nil {
		return nil, fmt.Errorf("Precompiled: %w", err)
	}
	return m.normalize, nil
}
