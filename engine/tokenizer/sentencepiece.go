package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// This file holds the parts of tokenizer.json that SentencePiece models
// converted to BPE use (Gemma, Llama 2, Mistral): spaces written as "▁"
// by a Replace/Prepend normalizer or a Metaspace pre-tokenizer, characters
// outside the vocabulary as <0xNN> byte tokens (the BPE model's
// byte_fallback), and the decoders that undo both.

// replaceNormalizer is HF's Replace normalizer: every occurrence of the
// pattern, left to right, replaced by content. A Regex pattern runs on
// the backtracking engine of the Split pre-tokenizer (Oniguruma's
// leftmost-first semantics), as XLM-R's converter writes " {2,}".
func replaceNormalizer(cfg normalizerJSON) (normalizer, error) {
	if cfg.Pattern != nil && cfg.Pattern.Regex != nil && cfg.Content != nil {
		re, err := compileSplitPattern(*cfg.Pattern.Regex)
		if err != nil {
			return nil, fmt.Errorf("Replace: %w", err)
		}
		content := *cfg.Content
		return func(s string) string {
			found := re.matches(s)
			if len(found) == 0 {
				return s
			}
			var b strings.Builder
			b.Grow(len(s))
			last := 0
			for _, m := range found {
				b.WriteString(s[last:m[0]])
				b.WriteString(content)
				last = m[1]
			}
			b.WriteString(s[last:])
			return b.String()
		}, nil
	}
	from, to, err := replacePattern(cfg.Pattern, cfg.Content)
	if err != nil {
		return nil, err
	}
	return func(s string) string { return strings.ReplaceAll(s, from, to) }, nil
}

// replacePattern reads the pattern and content of a Replace decoder (or
// a normalizer with a String pattern); only literal (String) patterns are
// supported there.
func replacePattern(p *patternJSON, content *string) (from, to string, err error) {
	switch {
	case p == nil || content == nil:
		return "", "", errors.New("Replace: missing pattern or content")
	case p.Regex != nil:
		return "", "", fmt.Errorf("Replace: regex pattern %q is not supported", *p.Regex)
	case p.String == nil || *p.String == "":
		return "", "", errors.New("Replace: empty pattern")
	}
	return *p.String, *content, nil
}

// prependNormalizer is HF's Prepend normalizer: text that is not empty
// gets the prefix. It runs on each stretch between added tokens, so Llama
// 2's "▁" also lands after "<s>" in the text.
func prependNormalizer(cfg normalizerJSON) (normalizer, error) {
	if cfg.Prepend == nil {
		return nil, errors.New("Prepend: missing prepend")
	}
	prefix := *cfg.Prepend
	return func(s string) string {
		if s == "" {
			return s
		}
		return prefix + s
	}, nil
}

// prependScheme says where the Metaspace pre-tokenizer adds a replacement
// character in front of a piece.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst                // only in front of the text's first piece
	prependNever
)

type metaspaceJSON struct {
	Replacement    string  `json:"replacement"`
	PrependScheme  *string `json:"prepend_scheme"`
	AddPrefixSpace *bool   `json:"add_prefix_space"` // before prepend_scheme existed
	Split          *bool   `json:"split"`
}

// metaspaceStep is HF's Metaspace pre-tokenizer: spaces become the
// replacement character, one is prepended as the scheme says, and with
// split the piece is cut in front of every replacement character.
type metaspaceStep struct {
	rep    string
	scheme prependScheme
	split  bool
}

func newMetaspaceStep(raw json.RawMessage) (*metaspaceStep, error) {
	cfg := metaspaceJSON{Replacement: "▁"}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	st := &metaspaceStep{rep: cfg.Replacement, split: cfg.Split == nil || *cfg.Split}
	if []rune(st.rep) == nil || len([]rune(st.rep)) != 1 {
		return nil, fmt.Errorf("Metaspace: replacement %q is not one character", st.rep)
	}
	switch {
	case cfg.PrependScheme != nil:
		switch *cfg.PrependScheme {
		case "always":
			st.scheme = prependAlways
		case "first":
			st.scheme = prependFirst
		case "never":
			st.scheme = prependNever
		default:
			return nil, fmt.Errorf("Metaspace: unknown prepend_scheme %q", *cfg.PrependScheme)
		}
	case cfg.AddPrefixSpace != nil && !*cfg.AddPrefixSpace:
		st.scheme = prependNever
	}
	return st, nil
}

func (st *metaspaceStep) apply(s string, dst []string) []string {
	return st.applyAt(s, true, dst)
}

// applyAt cuts one piece; atStart says whether the piece begins the
// original text (what the "first" scheme looks at).
func (st *metaspaceStep) applyAt(s string, atStart bool, dst []string) []string {
	s = strings.ReplaceAll(s, " ", st.rep)
	if !strings.HasPrefix(s, st.rep) && (st.scheme == prependAlways || st.scheme == prependFirst && atStart) {
		s = st.rep + s
	}
	if !st.split {
		return append(dst, s)
	}
	// MergedWithNext on the replacement character: every piece but the
	// first starts with one.
	start := 0
	for i := len(st.rep); i <= len(s); {
		j := strings.Index(s[i:], st.rep)
		if j < 0 {
			break
		}
		if i+j > start {
			dst = append(dst, s[start:i+j])
		}
		start = i + j
		i += j + len(st.rep)
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}

// startAware is a pre-tokenizer step whose output depends on whether its
// piece begins the original text.
type startAware interface {
	applyAt(s string, atStart bool, dst []string) []string
}

// textDecoder is a decoder of tokenizer.json other than WordPiece: a
// sequence of per-token rewrites, then optionally ByteFallback, Fuse and a
// Strip of the joined text.
type textDecoder struct {
	perToken []func(token string, first bool) string
	// byteLevel maps byte-level alphabet tokens back to bytes.
	byteLevel bool
	// byteFallback turns runs of <0xNN> tokens into their bytes.
	byteFallback bool
	// firstDiffers: a per-token rewrite treats the first token apart.
	firstDiffers bool
	// stripStart leading stripChar characters are cut from the joined
	// text (Strip after Fuse).
	stripStart int
	stripChar  rune
	// join: no decoder; tokens are joined with spaces.
	join bool
}

type textDecoderJSON struct {
	Type          string            `json:"type"`
	Decoders      []json.RawMessage `json:"decoders"`
	Pattern       *patternJSON      `json:"pattern"`
	Content       *string           `json:"content"`
	Start         int               `json:"start"`
	Stop          int               `json:"stop"`
	Replacement   string            `json:"replacement"`
	PrependScheme *string           `json:"prepend_scheme"`
	AddPrefix     *bool             `json:"add_prefix_space"`
}

// parseTextDecoder reads a decoder value (null: tokens joined with
// spaces, as HF does without a decoder).
func parseTextDecoder(raw json.RawMessage) (*textDecoder, error) {
	d := &textDecoder{}
	if isNull(raw) {
		d.join = true
		return d, nil
	}
	var fused bool
	if err := d.add(raw, &fused); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *textDecoder) add(raw json.RawMessage, fused *bool) error {
	var cfg textDecoderJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	// Per-token rewrites must come before the steps that join tokens:
	// after them HF rewrites joined runs, which this table of texts by id
	// cannot express.
	perToken := func() error {
		if d.byteFallback || *fused || d.stripStart > 0 {
			return fmt.Errorf("a %s decoder after ByteFallback, Fuse or Strip is not supported", cfg.Type)
		}
		return nil
	}
	switch cfg.Type {
	case "Sequence":
		if len(cfg.Decoders) == 0 {
			return errors.New("empty Sequence")
		}
		for i, sub := range cfg.Decoders {
			if err := d.add(sub, fused); err != nil {
				return fmt.Errorf("decoders[%d]: %w", i, err)
			}
		}
	case "ByteLevel":
		if err := perToken(); err != nil {
			return err
		}
		if len(d.perToken) > 0 {
			return errors.New("ByteLevel after another decoder is not supported")
		}
		d.byteLevel = true
	case "Replace":
		if err := perToken(); err != nil {
			return err
		}
		from, to, err := replacePattern(cfg.Pattern, cfg.Content)
		if err != nil {
			return err
		}
		d.perToken = append(d.perToken, func(s string, _ bool) string { return strings.ReplaceAll(s, from, to) })
	case "Metaspace":
		if err := perToken(); err != nil {
			return err
		}
		rep := cfg.Replacement
		if rep == "" {
			rep = "▁"
		}
		// HF drops every replacement character of the first token unless
		// the scheme is "never" (add_prefix_space false before schemes).
		dropFirst := !(cfg.PrependScheme != nil && *cfg.PrependScheme == "never" || cfg.PrependScheme == nil && cfg.AddPrefix != nil && !*cfg.AddPrefix)
		d.firstDiffers = d.firstDiffers || dropFirst
		d.perToken = append(d.perToken, func(s string, first bool) string {
			if first && dropFirst {
				return strings.ReplaceAll(s, rep, "")
			}
			return strings.ReplaceAll(s, rep, " ")
		})
	case "ByteFallback":
		if *fused || d.stripStart > 0 {
			return errors.New("ByteFallback after Fuse or Strip is not supported")
		}
		d.byteFallback = true
	case "Fuse":
		*fused = true
	case "Strip":
		if !*fused || cfg.Stop != 0 || cfg.Content == nil || len([]rune(*cfg.Content)) != 1 {
			return errors.New("only a Strip of leading characters after Fuse is supported")
		}
		d.stripStart, d.stripChar = cfg.Start, []rune(*cfg.Content)[0]
	default:
		return fmt.Errorf("unsupported decoder type %q", cfg.Type)
	}
	return nil
}

// buildTextDecoder fills the decoded texts of every id (and of every id as
// the first token, when that differs) and the byte of every <0xNN> token.
func (t *Tokenizer) buildTextDecoder(d *textDecoder) {
	t.dec = d
	t.decoded = make([]string, len(t.tokens))
	if d.firstDiffers {
		t.decodedFirst = make([]string, len(t.tokens))
	}
	if d.byteFallback {
		t.byteOf = make([]int16, len(t.tokens))
	}
	for id, token := range t.tokens {
		if !t.known[id] {
			continue
		}
		if d.byteFallback {
			t.byteOf[id] = -1
			if b, ok := byteFallbackToken(token); ok {
				t.byteOf[id] = int16(b)
			}
		}
		text := token
		if d.byteLevel {
			if raw, ok := byteLevelDecode(token); ok {
				text = string(raw)
			}
		}
		first := text
		for _, f := range d.perToken {
			text, first = f(text, false), f(first, true)
		}
		t.decoded[id] = text
		if d.byteFallback && t.byteOf[id] >= 0 {
			t.decoded[id] = string([]byte{byte(t.byteOf[id])})
			first = t.decoded[id]
		}
		if d.firstDiffers {
			t.decodedFirst[id] = first
		}
	}
}

// byteFallbackToken parses a byte token "<0xNN>" (two hex digits).
func byteFallbackToken(token string) (byte, bool) {
	if len(token) != 6 || !strings.HasPrefix(token, "<0x") || token[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range token[3:5] {
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | byte(c-'0')
		case c >= 'A' && c <= 'F':
			b = b<<4 | byte(c-'A'+10)
		case c >= 'a' && c <= 'f':
			b = b<<4 | byte(c-'a'+10)
		default:
			return 0, false
		}
	}
	return b, true
}
