package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPieceModel is the WordPiece model of tokenizer.json (BERT): each
// piece is split greedily into the longest vocabulary entries from its
// start, the entries after the first spelled with the continuing prefix
// ("##"); a piece with no such split, or longer than maxChars characters,
// is the unknown token alone.
type wordPieceModel struct {
	vocab    map[string]int32
	unkID    int32
	prefix   string
	maxChars int
}

// defaultMaxInputCharsPerWord is HF's default for a missing field.
const defaultMaxInputCharsPerWord = 100

func (t *Tokenizer) buildWordPiece(cfg *modelJSON) error {
	m := &wordPieceModel{vocab: t.vocab, prefix: "##", maxChars: cfg.MaxInputCharsPerWord}
	if cfg.ContinuingSubwordPrefix != nil {
		m.prefix = *cfg.ContinuingSubwordPrefix
	}
	if m.maxChars <= 0 {
		m.maxChars = defaultMaxInputCharsPerWord
	}
	unk := "[UNK]"
	if cfg.UnkToken != nil {
		unk = *cfg.UnkToken
	}
	id, ok := t.vocab[unk]
	if !ok {
		return fmt.Errorf("unk_token %q is not in the vocabulary", unk)
	}
	m.unkID = id
	t.model = m
	return nil
}

func (m *wordPieceModel) encode(piece string, _ *bpeScratch, dst []int) []int {
	if utf8.RuneCountInString(piece) > m.maxChars {
		return append(dst, int(m.unkID))
	}
	mark := len(dst)
	var buf []byte
	for start := 0; start < len(piece); {
		end, found := len(piece), int32(-1)
		for end > start {
			sub := piece[start:end]
			if start > 0 {
				buf = append(append(buf[:0], m.prefix...), sub...)
				sub = string(buf) // the map lookup of a converted []byte does not allocate
			}
			if id, ok := m.vocab[sub]; ok {
				found = id
				break
			}
			_, size := utf8.DecodeLastRuneInString(piece[start:end])
			end -= size
		}
		if found < 0 {
			return append(dst[:mark], int(m.unkID))
		}
		dst = append(dst, int(found))
		start = end
	}
	return dst
}

// bertNormalizer is HF's BertNormalizer: drop NUL, U+FFFD and control
// characters (as HF's Unicode version has them: bert_tables.go) and turn white space into spaces; put spaces around CJK
// ideographs; strip accents (NFD, then drop nonspacing marks; by default
// when lowercasing); lowercase.
func bertNormalizer(cfg normalizerJSON) normalizer {
	strip := cfg.Lowercase
	if cfg.StripAccents != nil {
		strip = *cfg.StripAccents
	}
	return func(s string) string {
		var b strings.Builder
		b.Grow(len(s))
		for _, r := range s {
			if cfg.CleanText {
				if r == 0 || r == utf8.RuneError || isBertControl(r) {
					continue
				}
				if isBertSpace(r) {
					r = ' '
				}
			}
			if cfg.HandleChineseChars && isCJK(r) {
				b.WriteByte(' ')
				b.WriteRune(r)
				b.WriteByte(' ')
				continue
			}
			b.WriteRune(r)
		}
		s = b.String()
		if strip {
			s = stripAccents(s)
		}
		if cfg.Lowercase {
			s = bertLower(s)
		}
		return s
	}
}

// stripAccents decomposes s (NFD) and drops the nonspacing marks (as
// HF's Unicode version has them: bert_tables.go).
func stripAccents(s string) string {
	s = norm.NFD.String(s)
	return strings.Map(func(r rune) rune {
		if unicode.Is(bertMarkTable, r) {
			return -1
		}
		return r
	}, s)
}

// bertLower lowercases rune by rune with the full mapping (İ becomes i
// and a combining dot), without the context rules of final sigma, as
// Rust's char::to_lowercase does.
func bertLower(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == 'İ' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// isBertSpace: tab, newline, carriage return and the White_Space property.
func isBertSpace(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.White_Space, r)
}

// isBertControl: the characters clean_text drops (bert_tables.go).
func isBertControl(r rune) bool { return unicode.Is(bertControlTable, r) }

// isCJK reports whether r is in the CJK ideograph blocks BERT splits on.
func isCJK(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF,
		r >= 0x3400 && r <= 0x4DBF,
		r >= 0x20000 && r <= 0x2A6DF,
		r >= 0x2A700 && r <= 0x2B73F,
		r >= 0x2B740 && r <= 0x2B81F,
		r >= 0x2B920 && r <= 0x2CEAF,
		r >= 0xF900 && r <= 0xFAFF,
		r >= 0x2F800 && r <= 0x2FA1F:
		return true
	}
	return false
}

// bertPreTokenizer splits on white space (dropped) and isolates every
// punctuation character (ASCII punctuation, which includes symbols such as
// $ and +, and the P categories of HF's Unicode version; bert_tables.go).
type bertPreTokenizer struct{}

func (bertPreTokenizer) apply(s string, dst []string) []string {
	start := -1
	for i, r := range s {
		switch {
		case unicode.Is(unicode.White_Space, r):
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
		case isBertPunct(r):
			if start >= 0 {
				dst = append(dst, s[start:i])
				start = -1
			}
			dst = append(dst, s[i:i+utf8.RuneLen(r)])
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		dst = append(dst, s[start:])
	}
	return dst
}

func isBertPunct(r rune) bool { return unicode.Is(bertPunctTable, r) }

type wordPieceDecoderJSON struct {
	Type    string `json:"type"`
	Prefix  string `json:"prefix"`
	Cleanup bool   `json:"cleanup"`
}

// wordPieceDecoder reports whether the decoder is WordPiece, and its
// prefix and cleanup setting.
func wordPieceDecoder(raw json.RawMessage) (wordPieceDecoderJSON, bool, error) {
	var cfg wordPieceDecoderJSON
	if isNull(raw) {
		return cfg, false, nil
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, false, err
	}
	return cfg, cfg.Type == "WordPiece", nil
}

// buildWordPieceDecoder fills the decoded text of every id as HF's
// WordPiece decoder writes it: a token after the first loses its prefix,
// or else gets a space in front; the first is kept as it is. Cleanup then
// takes the space off before punctuation and contractions, token by token.
func (t *Tokenizer) buildWordPieceDecoder(cfg wordPieceDecoderJSON) {
	t.decoded = make([]string, len(t.tokens))
	t.decodedFirst = make([]string, len(t.tokens))
	for id, token := range t.tokens {
		if !t.known[id] {
			continue
		}
		first, next := token, " "+token
		if rest, ok := strings.CutPrefix(token, cfg.Prefix); ok {
			next = rest
		}
		if cfg.Cleanup {
			first, next = wordPieceCleanup(first), wordPieceCleanup(next)
		}
		t.decodedFirst[id], t.decoded[id] = first, next
	}
}

var wordPieceCleaner = strings.NewReplacer(
	" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
	" n't", "n't", " 'm", "'m", " do not", " don't", " 's", "'s", " 've", "'ve", " 're", "'re",
)

func wordPieceCleanup(s string) string { return wordPieceCleaner.Replace(s) }
