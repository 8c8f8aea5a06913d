package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text between added tokens before pre-tokenizing;
// nil means the identity.
type normalizer func(string) string

type normalizerJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	// BertNormalizer
	CleanText          bool  `json:"clean_text"`
	HandleChineseChars bool  `json:"handle_chinese_chars"`
	StripAccents       *bool `json:"strip_accents"`
	Lowercase          bool  `json:"lowercase"`
	// Replace
	Pattern *patternJSON `json:"pattern"`
	Content *string      `json:"content"`
	// Prepend
	Prepend *string `json:"prepend"`
	// Precompiled
	PrecompiledCharsmap *string `json:"precompiled_charsmap"`
	// Strip
	StripLeft  bool `json:"strip_left"`
	StripRight bool `json:"strip_right"`
}

// buildNormalizer builds the normalizer of a tokenizer.json "normalizer"
// value; null or an empty Sequence give nil.
func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var cfg normalizerJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	switch cfg.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "BertNormalizer":
		return bertNormalizer(cfg), nil
	case "Replace":
		return replaceNormalizer(cfg)
	case "Prepend":
		return prependNormalizer(cfg)
	case "Precompiled":
		return precompiledNormalizer(cfg)
	case "Strip":
		return stripNormalizer(cfg), nil
	case "Sequence":
		var steps []normalizer
		for i, sub := range cfg.Normalizers {
			n, err := buildNormalizer(sub)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			if n != nil {
				steps = append(steps, n)
			}
		}
		switch len(steps) {
		case 0:
			return nil, nil
		case 1:
			return steps[0], nil
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", cfg.Type)
}

// stripNormalizer is HF's Strip normalizer: white space (Rust's
// char::is_whitespace, the White_Space property) cut from either end.
func stripNormalizer(cfg normalizerJSON) normalizer {
	isSpace := func(r rune) bool { return unicode.Is(unicode.White_Space, r) }
	return func(s string) string {
		if cfg.StripLeft {
			s = strings.TrimLeftFunc(s, isSpace)
		}
		if cfg.StripRight {
			s = strings.TrimRightFunc(s, isSpace)
		}
		return s
	}
}

// isNull reports whether a JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
