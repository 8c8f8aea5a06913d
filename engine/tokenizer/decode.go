package tokenizer

import "unicode/utf8"

// Decode returns the text of ids. With skipSpecial, special tokens are left
// out (added tokens marked special: true; Qwen's <think> and <tool_call>
// are not special and stay). Unknown ids are skipped; byte sequences that
// are not UTF-8 become U+FFFD.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	buf := make([]byte, 0, 4*len(ids))
	first := true
	for _, id := range ids {
		if !t.decodable(id, skipSpecial) {
			continue
		}
		if t.decodeJoin && !first {
			buf = append(buf, ' ')
		}
		if first && t.decodedFirst != nil {
			buf = append(buf, t.decodedFirst[id]...)
		} else {
			buf = append(buf, t.decoded[id]...)
		}
		first = false
	}
	return string(appendValidUTF8(nil, buf))
}

// decodable reports whether id contributes to decoded text.
func (t *Tokenizer) decodable(id int, skipSpecial bool) bool {
	return id >= 0 && id < len(t.known) && t.known[id] && !(skipSpecial && t.special[id])
}

// StreamDecoder decodes ids one at a time, as a model generates them, and
// only ever returns whole UTF-8 characters: bytes of a character that later
// tokens complete are held back. The outputs of Add and Flush concatenate
// to Decode of the same ids. It is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
	started     bool
}

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Add decodes one more id and returns the text that is now complete.
func (d *StreamDecoder) Add(id int) string {
	if !d.t.decodable(id, d.skipSpecial) {
		return ""
	}
	if d.t.decodeJoin && d.started {
		d.pending = append(d.pending, ' ')
	}
	if !d.started && d.t.decodedFirst != nil {
		d.pending = append(d.pending, d.t.decodedFirst[id]...)
	} else {
		d.pending = append(d.pending, d.t.decoded[id]...)
	}
	d.started = true
	ready := len(d.pending) - incompleteTail(d.pending)
	if ready == 0 {
		return ""
	}
	out := string(appendValidUTF8(nil, d.pending[:ready]))
	d.pending = d.pending[:copy(d.pending, d.pending[ready:])]
	return out
}

// Flush returns what is held back, with an unfinished character as U+FFFD,
// and resets the decoder for a new stream.
func (d *StreamDecoder) Flush() string {
	out := string(appendValidUTF8(nil, d.pending))
	d.pending = d.pending[:0]
	d.started = false
	return out
}

// appendValidUTF8 appends b to dst with every maximal ill-formed
// subsequence replaced by U+FFFD, as Rust's from_utf8_lossy and Python's
// errors="replace" do.
func appendValidUTF8(dst, b []byte) []byte {
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			dst = append(dst, b[0])
			b = b[1:]
			continue
		}
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
			b = b[max(validPrefix(b), 1):]
			continue
		}
		dst = append(dst, b[:size]...)
		b = b[size:]
	}
	return dst
}

// sequenceLen returns the length of the UTF-8 sequence a lead byte starts,
// or 0 if it cannot start one.
func sequenceLen(lead byte) int {
	switch {
	case lead < 0x80:
		return 1
	case lead >= 0xC2 && lead <= 0xDF:
		return 2
	case lead >= 0xE0 && lead <= 0xEF:
		return 3
	case lead >= 0xF0 && lead <= 0xF4:
		return 4
	}
	return 0
}

// validPrefix returns how many bytes at the start of b begin a well-formed
// UTF-8 sequence (counting the whole sequence if it is complete), or 0 if
// b[0] cannot start one.
func validPrefix(b []byte) int {
	need := sequenceLen(b[0])
	if need == 0 {
		return 0
	}
	lo, hi := byte(0x80), byte(0xBF)
	switch b[0] {
	case 0xE0:
		lo = 0xA0
	case 0xED:
		hi = 0x9F
	case 0xF0:
		lo = 0x90
	case 0xF4:
		hi = 0x8F
	}
	n := 1
	for ; n < need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// incompleteTail returns the length of the unfinished but so far valid
// UTF-8 sequence at the end of b, or 0.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c >= 0x80 && c < 0xC0 {
			continue // a continuation byte: look further back
		}
		if need := sequenceLen(c); need > k && validPrefix(b[len(b)-k:]) == k {
			return k
		}
		return 0
	}
	return 0
}
