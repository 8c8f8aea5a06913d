package anthropic

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// KeySource returns the key thinking signatures are made with. It must be
// the same on every node of a cluster (so a block signed by one node
// verifies on any other) and the same across restarts; see DESIGN.md,
// "Thinking signatures", for where a node takes it from.
type KeySource func(ctx context.Context) ([]byte, error)

// Signature formats: a version byte, the key id, then the format's body.
// Both formats are base64 (standard, padded), as Anthropic's are.
const (
	// sigSigned attests a block whose thinking the client holds: the
	// model id in clear (uvarint length, bytes), then
	// HMAC-SHA256(mac key, version|key id|model|len(thinking)|thinking).
	sigSigned byte = 1
	// sigSealed carries the thinking itself, for display "omitted" (the
	// block's thinking is empty): a 12-byte nonce, then AES-256-GCM of
	// model (uvarint length, bytes) and thinking, authenticated with
	// version|key id.
	sigSealed byte = 2

	keyIDLen = 4
	macLen   = sha256.Size
	// minKeyLen is the shortest key a KeySource may return.
	minKeyLen = 16
)

// thinkingCodec signs, seals and checks thinking blocks with keys derived
// from the cluster's key: one for the MAC, one for the cipher, and a short
// id naming the key, so a block made under another key is told apart from
// an edited one.
type thinkingCodec struct {
	keyID [keyIDLen]byte
	mac   []byte
	aead  cipher.AEAD
}

func newThinkingCodec(key []byte) (*thinkingCodec, error) {
	if len(key) < minKeyLen {
		return nil, fmt.Errorf("anthropic: thinking key of %d bytes, at least %d needed", len(key), minKeyLen)
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	c := &thinkingCodec{mac: derive("fusion-thinking-mac-v1")}
	copy(c.keyID[:], derive("fusion-thinking-key-id-v1"))
	block, err := aes.NewCipher(derive("fusion-thinking-seal-v1"))
	if err != nil {
		return nil, fmt.Errorf("anthropic: thinking cipher: %w", err)
	}
	if c.aead, err = cipher.NewGCM(block); err != nil {
		return nil, fmt.Errorf("anthropic: thinking cipher: %w", err)
	}
	return c, nil
}

// header is a signature's first bytes: version and key id.
func (c *thinkingCodec) header(version byte) []byte {
	return append([]byte{version}, c.keyID[:]...)
}

func appendModel(b []byte, model string) []byte {
	b = binary.AppendUvarint(b, uint64(len(model)))
	return append(b, model...)
}

// sum is the MAC of a signed block.
func (c *thinkingCodec) sum(head []byte, model, thinking string) []byte {
	m := hmac.New(sha256.New, c.mac)
	m.Write(appendModel(append([]byte(nil), head...), model))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(thinking)))
	m.Write(n[:])
	m.Write([]byte(thinking))
	return m.Sum(nil)
}

// sign returns the signature of a thinking block model wrote, whose text
// the client holds.
func (c *thinkingCodec) sign(model, thinking string) string {
	b := appendModel(c.header(sigSigned), model)
	return base64.StdEncoding.EncodeToString(append(b, c.sum(c.header(sigSigned), model, thinking)...))
}

// seal returns the signature of a thinking block shown empty: it carries
// the thinking, encrypted, so the next turn's prompt can hold it.
func (c *thinkingCodec) seal(model, thinking string) string {
	head := c.header(sigSealed)
	nonce := make([]byte, c.aead.NonceSize())
	_, _ = rand.Read(nonce) // never fails: crypto/rand crashes the program rather than return an error
	plain := append(appendModel(nil, model), thinking...)
	out := append(append(head, nonce...), c.aead.Seal(nil, nonce, plain, head)...)
	return base64.StdEncoding.EncodeToString(out)
}

// Why a signature does not check out.
var (
	errSigMalformed = errors.New("not a signature this server made")
	errSigOtherKey  = errors.New("made with another key (another cluster, or before the key changed)")
	errSigMismatch  = errors.New("does not match the block (edited or forged)")
)

// open checks a signature against a block's text and returns the
// reasoning the block stands for: its own text (signed) or the text the
// signature carries (sealed; the block's text must then be empty or that
// text), and the model that wrote it.
func (c *thinkingCodec) open(signature, thinking string) (reasoning, model string, err error) {
	raw, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(raw) < 1+keyIDLen {
		return "", "", errSigMalformed
	}
	version, head, body := raw[0], raw[:1+keyIDLen], raw[1+keyIDLen:]
	if version != sigSigned && version != sigSealed {
		return "", "", errSigMalformed
	}
	if !bytes.Equal(head[1:], c.keyID[:]) {
		return "", "", errSigOtherKey
	}
	switch version {
	case sigSigned:
		model, rest, ok := cutModel(body)
		if !ok || len(rest) != macLen {
			return "", "", errSigMalformed
		}
		if !hmac.Equal(rest, c.sum(head, model, thinking)) {
			return "", "", errSigMismatch
		}
		return thinking, model, nil
	default:
		n := c.aead.NonceSize()
		if len(body) < n+c.aead.Overhead() {
			return "", "", errSigMalformed
		}
		plain, err := c.aead.Open(nil, body[:n], body[n:], head)
		if err != nil {
			return "", "", errSigMismatch
		}
		model, text, ok := cutModel(plain)
		if !ok || (thinking != "" && thinking != string(text)) {
			return "", "", errSigMismatch
		}
		return string(text), model, nil
	}
}

// cutModel splits a length-prefixed model id off b.
func cutModel(b []byte) (model string, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// codecs turns a KeySource into a codec, built once: the key never changes
// while the node runs.
type codecs struct {
	source KeySource
	mu     sync.Mutex
	codec  *thinkingCodec
}

func (cs *codecs) get(ctx context.Context) (*thinkingCodec, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.codec != nil {
		return cs.codec, nil
	}
	key, err := cs.source(ctx)
	if err != nil {
		return nil, err
	}
	c, err := newThinkingCodec(key)
	if err != nil {
		return nil, err
	}
	cs.codec = c
	return c, nil
}

// RandomKey is a KeySource for a server alone and without a place to keep
// a key: a random key, the same for the life of the returned source.
func RandomKey() KeySource {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return func(context.Context) ([]byte, error) { return key, nil }
}
