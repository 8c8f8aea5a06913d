package tokenizer

import (
	"maps"
	"slices"
	"sync"
)

// Tokenizer encodes text into token ids and decodes ids into text. It is
// immutable once built and safe for concurrent use.
type Tokenizer struct {
	model     pieceModel
	normalize normalizer
	pre       *preTokenizer
	// rawAdded matches the added tokens with normalized=false on the raw
	// text; normAdded the others on normalized text.
	rawAdded, normAdded *addedMatcher
	wrap                specialWrap
	pair                []pairPiece // the post-processor's pair template (nil: none)

	// Tables indexed by id.
	tokens  []string // the token's text, "" if the id is unused
	known   []bool   // the id is a vocabulary or added token
	decoded []string // the bytes the id decodes to
	// decodedFirst (WordPiece) is what the id decodes to as the first
	// token; decoded is then what it decodes to after another.
	decodedFirst []string
	special      []bool // the id is a special added token
	// decodeJoin: no decoder, tokens are joined with spaces.
	decodeJoin bool
	// dec is the decoder (nil for WordPiece); byteOf the byte of each
	// <0xNN> token (−1 for others) when it has ByteFallback.
	dec    *textDecoder
	byteOf []int16

	added map[string]int // added token content → id
	vocab map[string]int32

	bos       int // -1 if none
	eos       []int
	addBOS    bool
	templates map[string]string // by name; "default" is the default

	states sync.Pool // *encodeState
}

// pieceModel encodes one pre-tokenized piece: BPE merges or WordPiece's
// longest-match-first split.
type pieceModel interface {
	encode(piece string, sc *bpeScratch, dst []int) []int
}

// encodeState is the reusable working memory of one Encode call.
type encodeState struct {
	pieces, tmp []string
	bpe         bpeScratch
}

// Encode returns the token ids of text. With addSpecial, the tokens the
// post-processor adds (Llama 3's BOS) surround them; tokenize an already
// rendered chat template without them.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	st, _ := t.states.Get().(*encodeState)
	if st == nil {
		st = &encodeState{}
	}
	ids := make([]int, 0, len(text)/3+len(t.wrap.prefix)+len(t.wrap.suffix)+1)
	if addSpecial {
		ids = append(ids, t.wrap.prefix...)
	}
	ids = t.encodeRaw(text, st, ids)
	if addSpecial {
		ids = append(ids, t.wrap.suffix...)
	}
	// Drop the references to text before pooling.
	clear(st.pieces[:cap(st.pieces)])
	clear(st.tmp[:cap(st.tmp)])
	t.states.Put(st)
	return ids
}

// encodeRaw splits text at the added tokens matched on raw text.
func (t *Tokenizer) encodeRaw(text string, st *encodeState, ids []int) []int {
	offset, from := 0, 0
	for {
		m, ok := t.rawAdded.next(text, from, offset)
		if !ok {
			break
		}
		if m.start > offset {
			ids = t.encodeNormalized(text[offset:m.start], offset == 0, st, ids)
		}
		ids = append(ids, m.id)
		offset, from = m.stop, m.resume
	}
	if offset < len(text) {
		ids = t.encodeNormalized(text[offset:], offset == 0, st, ids)
	}
	return ids
}

// encodeNormalized normalizes a stretch of text between added tokens and
// splits it at the added tokens matched on normalized text; atStart says
// whether the stretch begins the text.
func (t *Tokenizer) encodeNormalized(text string, atStart bool, st *encodeState, ids []int) []int {
	if t.normalize != nil {
		text = t.normalize(text)
	}
	if t.normAdded.empty() {
		return t.encodeWords(text, atStart, st, ids)
	}
	offset, from := 0, 0
	for {
		m, ok := t.normAdded.next(text, from, offset)
		if !ok {
			break
		}
		if m.start > offset {
			ids = t.encodeWords(text[offset:m.start], atStart && offset == 0, st, ids)
		}
		ids = append(ids, m.id)
		offset, from = m.stop, m.resume
	}
	if offset < len(text) {
		ids = t.encodeWords(text[offset:], atStart && offset == 0, st, ids)
	}
	return ids
}

// encodeWords pre-tokenizes normalized text and encodes each piece.
func (t *Tokenizer) encodeWords(text string, atStart bool, st *encodeState, ids []int) []int {
	if text == "" {
		return ids
	}
	st.pieces, st.tmp = t.pre.run(text, atStart, st.pieces, st.tmp)
	for _, piece := range st.pieces {
		if piece != "" {
			ids = t.model.encode(piece, &st.bpe, ids)
		}
	}
	return ids
}

// EOS returns the ids that end generation, in increasing order.
func (t *Tokenizer) EOS() []int { return slices.Clone(t.eos) }

// IsEOS reports whether id ends generation.
func (t *Tokenizer) IsEOS(id int) bool {
	_, found := slices.BinarySearch(t.eos, id)
	return found
}

// BOS returns the beginning-of-sequence id, if the model has one.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.bos >= 0 }

// AddBOS reports whether plain text (not a rendered chat template, which
// carries its own) should start with BOS: tokenizer_config.json's
// add_bos_token, or else whether the post-processor adds it. Encode with
// addSpecial follows tokenizer.json alone, as HF tokenizers does.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// ChatTemplate returns the default chat template source, or "".
func (t *Tokenizer) ChatTemplate() string { return t.templates["default"] }

// ChatTemplates returns every chat template by name; the default one is
// named "default".
func (t *Tokenizer) ChatTemplates() map[string]string { return maps.Clone(t.templates) }

// VocabSize returns the number of ids: one more than the largest id of the
// vocabulary and the added tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token given by its text (an added token's
// content, or a vocabulary entry in the byte-level alphabet).
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.added[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return int(id), ok
}

// Token returns the text of a token id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || !t.known[id] {
		return "", false
	}
	return t.tokens[id], true
}

// TokenBytes returns the bytes id decodes to on its own (possibly part of
// a UTF-8 character), for constrained decoding; false for unused ids.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	if id < 0 || id >= len(t.tokens) || !t.known[id] {
		return nil, false
	}
	return []byte(t.decoded[id]), true
}

// IsSpecial reports whether id is a special token, which decoding can skip.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}
