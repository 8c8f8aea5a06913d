package tokenizer

import "unicode/utf8"

// Decode returns the text of ids. With skipSpecial, special tokens are left
// out (added tokens marked special: true; Qwen's <think> and <tool_call>
// are not special and stay). Unknown ids are skipped; byte sequences that
// are not UTF-8 become U+FFFD (for a run of <0xNN> byte-fallback tokens
// that is not UTF-8, one U+FFFD per byte, as HF's ByteFallback does).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	d := decodeState{t: t, skipSpecial: skipSpecial}
	d.reset()
	d.pending = make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		d.add(id)
	}
	return d.take(true)
}

// decodable reports whether id contributes to decoded text.
func (t *Tokenizer) decodable(id int, skipSpecial bool) bool {
	return id >= 0 && id < len(t.known) && t.known[id] && !(skipSpecial && t.special[id])
}

// decodeState is the decoding of one stream of ids, shared by Decode and
// StreamDecoder.
type decodeState struct {
	t           *Tokenizer
	skipSpecial bool
	// eager moves the complete characters of a run of byte tokens out
	// before the run ends (streaming).
	eager   bool
	started bool
	pending []byte // decoded bytes not yet returned
	// run is the current run of byte-fallback bytes, of which the first
	// runDone were moved to pending.
	run       []byte
	runDone   int
	stripLeft int // leading strip characters still to cut
}

func (d *decodeState) reset() {
	d.started = false
	d.pending, d.run, d.runDone = d.pending[:0], d.run[:0], 0
	d.stripLeft = 0
	if d.t.dec != nil {
		d.stripLeft = d.t.dec.stripStart
	}
}

// add decodes one more id into pending (or the byte run).
func (d *decodeState) add(id int) {
	t := d.t
	if !t.decodable(id, d.skipSpecial) {
		return
	}
	if t.byteOf != nil && t.byteOf[id] >= 0 {
		d.run = append(d.run, byte(t.byteOf[id]))
		d.started = true
		if d.eager {
			d.moveCompleteRun()
		}
		return
	}
	d.endRun()
	if t.decodeJoin && d.started {
		d.pending = append(d.pending, ' ')
	}
	if !d.started && t.decodedFirst != nil {
		d.pending = append(d.pending, t.decodedFirst[id]...)
	} else {
		d.pending = append(d.pending, t.decoded[id]...)
	}
	d.started = true
}

// moveCompleteRun moves the whole characters at the start of what remains
// of the byte run to pending, stopping at an unfinished or invalid one.
func (d *decodeState) moveCompleteRun() {
	rest := d.run[d.runDone:]
	n := 0
	for n < len(rest) {
		r, size := utf8.DecodeRune(rest[n:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		n += size
	}
	d.pending = append(d.pending, rest[:n]...)
	d.runDone += n
}

// endRun ends a run of byte tokens: its bytes if they are UTF-8, else one
// U+FFFD per byte.
func (d *decodeState) endRun() {
	rest := d.run[d.runDone:]
	if utf8.Valid(rest) {
		d.pending = append(d.pending, rest...)
	} else {
		for range rest {
			d.pending = append(d.pending, "\uFFFD"...)
		}
	}
	d.run, d.runDone = d.run[:0], 0
}

// take returns the text that is complete (all of it when final), with
// ill-formed bytes as U+FFFD and the decoder's leading strip applied.
func (d *decodeState) take(final bool) string {
	if final {
		d.endRun()
	}
	ready := len(d.pending)
	if !final {
		ready -= incompleteTail(d.pending)
	}
	if ready == 0 {
		return ""
	}
	out := string(appendValidUTF8(nil, d.pending[:ready]))
	d.pending = d.pending[:copy(d.pending, d.pending[ready:])]
	for d.stripLeft > 0 && out != "" {
		r, size := utf8.DecodeRuneInString(out)
		if r != d.t.dec.stripChar {
			d.stripLeft = 0
			break
		}
		out = out[size:]
		d.stripLeft--
	}
	return out
}

// StreamDecoder decodes ids one at a time, as a model generates them, and
// only ever returns whole UTF-8 characters: bytes of a character that later
// tokens complete are held back. The outputs of Add and Flush concatenate
// to Decode of the same ids, except after a run of byte-fallback tokens
// that is not UTF-8 as a whole: its characters that were whole when they
// came are kept, where Decode turns every byte of the run into U+FFFD. It
// is not safe for concurrent use.
type StreamDecoder struct {
	d decodeState
}

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	s := &StreamDecoder{d: decodeState{t: t, skipSpecial: skipSpecial, eager: true}}
	s.d.reset()
	return s
}

// Add decodes one more id and returns the text that is now complete.
func (s *StreamDecoder) Add(id int) string {
	s.d.add(id)
	return s.d.take(false)
}

// Flush returns what is held back, with an unfinished character as U+FFFD,
// and resets the decoder for a new stream.
func (s *StreamDecoder) Flush() string {
	out := s.d.take(true)
	s.d.reset()
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
