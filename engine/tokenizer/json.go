package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// tokenizerJSON is the part of a tokenizer.json document the tokenizer uses.
type tokenizerJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
}

type modelJSON struct {
	Type string `json:"type"`
	// RawVocab is a map of token → id (BPE, WordPiece) or a list of
	// [token, score] pairs in id order (Unigram); readVocab fills Vocab and
	// Scores from it.
	RawVocab                json.RawMessage  `json:"vocab"`
	Vocab                   map[string]int32 `json:"-"`
	Scores                  []float64        `json:"-"`
	Pieces                  []string         `json:"-"` // Unigram: the token of each id
	UnkID                   *int             `json:"unk_id"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	MaxInputCharsPerWord    int              `json:"max_input_chars_per_word"`
}

// Option sets what a tokenizer.json document does not say: the special ids
// and chat templates, which live in other files of a model (or in GGUF
// metadata). Load sets them from the model directory.
type Option func(*Tokenizer)

// WithBOS sets the beginning-of-sequence id.
func WithBOS(id int) Option { return func(t *Tokenizer) { t.bos = id } }

// WithEOS sets the ids that end generation.
func WithEOS(ids ...int) Option { return func(t *Tokenizer) { t.eos = sortedUnique(ids) } }

// WithAddBOS says whether plain text should start with BOS.
func WithAddBOS(add bool) Option { return func(t *Tokenizer) { t.addBOS = add } }

// WithChatTemplate adds a chat template; name "" or "default" sets the
// default one.
func WithChatTemplate(name, source string) Option {
	return func(t *Tokenizer) {
		if name == "" {
			name = "default"
		}
		t.templates[name] = source
	}
}

// pieceCacheCapacity bounds the number of cached pieces per tokenizer.
const pieceCacheCapacity = 1 << 17

// FromJSON builds a tokenizer from a tokenizer.json document. Without
// options it has no EOS, its BOS is the first token the post-processor adds
// (if any), and it has no chat template.
func FromJSON(data []byte, opts ...Option) (*Tokenizer, error) {
	var doc tokenizerJSON
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if err := doc.Model.readVocab(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	t, err := build(&doc)
	if err != nil {
		return nil, err
	}
	for _, opt := range opts {
		opt(t)
	}
	return t, nil
}

func build(doc *tokenizerJSON) (*Tokenizer, error) {
	t := &Tokenizer{bos: -1, templates: map[string]string{}}
	if err := t.buildVocab(doc); err != nil {
		return nil, err
	}
	var err error
	if t.normalize, err = buildNormalizer(doc.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if t.pre, err = buildPreTokenizer(doc.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := t.buildModel(&doc.Model); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	// A pair template only serves text pairs (cross-encoders): one this
	// package cannot read leaves the tokenizer without pairs, not broken.
	t.pair, _ = buildPairTemplate(doc.PostProcessor)
	if t.wrap, err = buildPostProcessor(doc.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	for _, id := range slices.Concat(t.wrap.prefix, t.wrap.suffix) {
		if id < 0 || id >= len(t.tokens) {
			return nil, fmt.Errorf("post_processor: token id %d is out of range", id)
		}
	}
	if len(t.wrap.prefix) > 0 {
		t.bos = t.wrap.prefix[0]
		t.addBOS = true
	}
	if err := t.buildDecoder(doc.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	t.buildAddedMatchers(doc.AddedTokens)
	return t, nil
}

// buildVocab fills the id tables from the model vocabulary and the added
// tokens.
func (t *Tokenizer) buildVocab(doc *tokenizerJSON) error {
	count := len(doc.Model.Vocab)
	limit := 2*count + 1024 // ids must be dense enough for tables indexed by id
	maxID := -1
	for token, id := range doc.Model.Vocab {
		if id < 0 || int(id) >= limit {
			return fmt.Errorf("model: vocab[%q]: id %d is out of range for %d tokens", token, id, count)
		}
		maxID = max(maxID, int(id))
	}
	assignAddedIDs(doc.AddedTokens, doc.Model.Vocab)
	for _, tok := range doc.AddedTokens {
		if tok.Content != "" { // HF skips empty tokens, which keep their "id"
			maxID = max(maxID, tok.ID)
		}
	}
	n := maxID + 1
	t.tokens = make([]string, n)
	t.known = make([]bool, n)
	t.special = make([]bool, n)
	t.vocab = doc.Model.Vocab
	if t.vocab == nil {
		t.vocab = map[string]int32{}
	}
	for token, id := range t.vocab {
		// Two tokens with one id: keep the smaller text, so the choice
		// does not depend on map order.
		if !t.known[id] || token < t.tokens[id] {
			t.tokens[id] = token
		}
		t.known[id] = true
	}
	for id, token := range doc.Model.Pieces {
		t.tokens[id], t.known[id] = token, true
	}
	t.added = make(map[string]int, len(doc.AddedTokens))
	specials := map[string]bool{}
	for _, tok := range doc.AddedTokens {
		if tok.Content == "" {
			continue
		}
		t.added[tok.Content] = tok.ID
		t.tokens[tok.ID] = tok.Content
		t.known[tok.ID] = true
		if tok.Special {
			specials[tok.Content] = true
		}
	}
	for id, token := range t.tokens {
		t.special[id] = t.known[id] && specials[token]
	}
	return nil
}

// assignAddedIDs gives the added tokens the ids HF tokenizers gives them
// when it loads a tokenizer.json, whatever their "id" fields say (HF only
// warns when they differ): in order, a token already known (added before,
// or in the model vocabulary) keeps that id; a new one gets the next id
// after the vocabulary and the added tokens so far.
func assignAddedIDs(tokens []addedToken, vocab map[string]int32) {
	known := map[string]int{}
	maxAdded := -1
	for i := range tokens {
		tok := &tokens[i]
		if tok.Content == "" {
			continue
		}
		id, ok := known[tok.Content]
		if !ok {
			var v int32
			v, ok = vocab[tok.Content]
			id = int(v)
		}
		if !ok {
			switch {
			case maxAdded < 0:
				id = len(vocab)
			case maxAdded >= len(vocab) || len(vocab) == 0:
				id = maxAdded + 1
			default:
				id = len(vocab)
			}
		}
		tok.ID = id
		known[tok.Content] = id
		maxAdded = max(maxAdded, id)
	}
}

// readVocab reads the vocabulary: a map for BPE and WordPiece, a list of
// [token, score] pairs for Unigram. A token listed twice in a Unigram
// vocabulary resolves to its last id, as in HF.
func (m *modelJSON) readVocab() error {
	if m.Type != "Unigram" {
		if isNull(m.RawVocab) {
			return nil
		}
		if err := json.Unmarshal(m.RawVocab, &m.Vocab); err != nil {
			return fmt.Errorf("vocab: %w", err)
		}
		return nil
	}
	var pairs [][2]json.RawMessage
	if err := json.Unmarshal(m.RawVocab, &pairs); err != nil {
		return fmt.Errorf("vocab: want a list of [token, score]: %w", err)
	}
	if len(pairs) > math.MaxInt32 {
		return fmt.Errorf("vocab: %d tokens", len(pairs))
	}
	m.Vocab = make(map[string]int32, len(pairs))
	m.Scores = make([]float64, len(pairs))
	m.Pieces = make([]string, len(pairs))
	for i, p := range pairs {
		token := &m.Pieces[i]
		if err := json.Unmarshal(p[0], token); err != nil {
			return fmt.Errorf("vocab[%d]: token: %w", i, err)
		}
		if err := json.Unmarshal(p[1], &m.Scores[i]); err != nil {
			return fmt.Errorf("vocab[%d]: score: %w", i, err)
		}
		m.Vocab[*token] = int32(i)
	}
	return nil
}

func (t *Tokenizer) buildModel(cfg *modelJSON) error {
	switch cfg.Type {
	case "WordPiece":
		return t.buildWordPiece(cfg)
	case "Unigram":
		return t.buildUnigram(cfg)
	}
	if cfg.Type != "BPE" && !(cfg.Type == "" && cfg.Merges != nil) {
		return fmt.Errorf("unsupported model type %q (want BPE, WordPiece or Unigram)", cfg.Type)
	}
	if p := cfg.ContinuingSubwordPrefix; p != nil && *p != "" {
		return fmt.Errorf("continuing_subword_prefix %q is not supported", *p)
	}
	if s := cfg.EndOfWordSuffix; s != nil && *s != "" {
		return fmt.Errorf("end_of_word_suffix %q is not supported", *s)
	}
	m := &bpeModel{
		vocab:        t.vocab,
		byteLevel:    t.pre.byteLevel,
		ignoreMerges: cfg.IgnoreMerges,
		unkID:        -1,
		fuseUnk:      cfg.FuseUnk,
		byteFallback: cfg.ByteFallback,
		cache:        newPieceCache(pieceCacheCapacity),
	}
	if cfg.UnkToken != nil {
		id, ok := t.vocab[*cfg.UnkToken]
		if !ok {
			return fmt.Errorf("unk_token %q is not in the vocabulary", *cfg.UnkToken)
		}
		m.unkID = id
	}
	for b := range m.byteIDs {
		m.byteIDs[b] = -1
		if id, ok := t.vocab[string(byteLevelAlphabet[b])]; ok {
			m.byteIDs[b] = id
		}
	}
	if m.byteLevel && m.ignoreMerges {
		m.wholeVocab = make(map[string]int32, len(t.vocab))
		for token, id := range t.vocab {
			if raw, ok := byteLevelDecode(token); ok {
				m.wholeVocab[string(raw)] = id
			}
		}
	}
	merges, err := parseMerges(cfg.Merges)
	if err != nil {
		return err
	}
	m.pairs = newPairTable(len(merges))
	var joined []byte
	for rank, pair := range merges {
		left, ok := t.vocab[pair[0]]
		if !ok {
			return fmt.Errorf("merges[%d]: %q is not in the vocabulary", rank, pair[0])
		}
		right, ok := t.vocab[pair[1]]
		if !ok {
			return fmt.Errorf("merges[%d]: %q is not in the vocabulary", rank, pair[1])
		}
		joined = append(append(joined[:0], pair[0]...), pair[1]...)
		merged, ok := t.vocab[string(joined)]
		if !ok {
			return fmt.Errorf("merges[%d]: merged token %q is not in the vocabulary", rank, pair[0]+pair[1])
		}
		m.pairs.put(left, right, int32(rank), merged)
	}
	t.model = m
	return nil
}

// parseMerges reads merges written as "a b" strings or as ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if isNull(trimmed) {
		return nil, nil
	}
	if !bytes.HasPrefix(trimmed, []byte("[")) {
		return nil, errors.New("merges: not a list")
	}
	if bytes.HasPrefix(bytes.TrimLeft(trimmed[1:], " \t\r\n"), []byte("[")) {
		var pairs [][]string
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("merges[%d]: want 2 tokens, have %d", i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("merges: %w", err)
	}
	out := make([][2]string, len(lines))
	for i, line := range lines {
		left, right, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(right, " ") {
			return nil, fmt.Errorf("merges[%d]: %q is not two tokens separated by one space", i, line)
		}
		out[i] = [2]string{left, right}
	}
	return out, nil
}

type decoderJSON struct {
	Type     string            `json:"type"`
	Decoders []json.RawMessage `json:"decoders"`
}

// buildDecoder reads the decoder and fills the decoded bytes of every id
// (see textDecoder). ByteLevel maps the alphabet back to bytes; a token
// with a rune outside it (an added token such as DeepSeek's "<｜User｜>")
// decodes to its own UTF-8 text. Without a decoder, token texts are joined
// with spaces, as HF does.
func (t *Tokenizer) buildDecoder(raw json.RawMessage) error {
	if cfg, ok, err := wordPieceDecoder(raw); err != nil {
		return err
	} else if ok {
		t.buildWordPieceDecoder(cfg)
		return nil
	}
	d, err := parseTextDecoder(raw)
	if err != nil {
		return err
	}
	t.decodeJoin = d.join
	t.buildTextDecoder(d)
	return nil
}

// buildAddedMatchers splits the added tokens by where they are matched.
// Tokens matched on normalized text are looked for in their normalized form.
func (t *Tokenizer) buildAddedMatchers(tokens []addedToken) {
	var raw, normalized []addedToken
	for _, tok := range tokens {
		if tok.Normalized {
			normalized = append(normalized, tok)
		} else {
			raw = append(raw, tok)
		}
	}
	t.rawAdded = newAddedMatcher(raw, nil)
	var content func(addedToken) string
	if t.normalize != nil {
		content = func(tok addedToken) string { return t.normalize(tok.Content) }
	}
	t.normAdded = newAddedMatcher(normalized, content)
}

// sortedUnique returns ids sorted without repeats.
func sortedUnique(ids []int) []int {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
