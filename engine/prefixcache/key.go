package prefixcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Key names a block: a model and every token up to the block's end.
type Key [sha256.Size]byte

func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ModelKey hashes the parts that identify the KV a model computes (weight
// fingerprint, layer range, backend KV layout, ...) into the chain's seed.
func ModelKey(parts ...string) Key {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte("fusion prefix cache model v1\x00"))
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// Chain returns the keys of the whole blocks of tokens, blockSize tokens
// each: key_i = SHA-256(key_{i−1} ‖ tokens of block i as uint32 LE), with
// key_{−1} = model. A partial last block has no key.
func Chain(model Key, tokens []int, blockSize int) []Key {
	if blockSize <= 0 {
		return nil
	}
	keys := make([]Key, 0, len(tokens)/blockSize)
	prev := model
	buf := make([]byte, len(prev)+4*blockSize)
	for end := blockSize; end <= len(tokens); end += blockSize {
		copy(buf, prev[:])
		for i, t := range tokens[end-blockSize : end] {
			binary.LittleEndian.PutUint32(buf[len(prev)+4*i:], uint32(t))
		}
		prev = sha256.Sum256(buf)
		keys = append(keys, prev)
	}
	return keys
}
