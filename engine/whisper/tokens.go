package whisper

import (
	"fmt"
	"strings"

	"fusion/engine/tokenizer"
)

// Special are the ids of Whisper's special tokens in a model's vocabulary.
type Special struct {
	EOT, SOT, SOTPrev, SOTLM, NoSpeech, NoTimestamps int
	Transcribe, Translate                            int
	// TimestampBegin is <|0.00|>; timestamps run to the last id of the
	// vocabulary, one per 0.02 s.
	TimestampBegin int
	// Multilingual: the vocabulary has the multilingual models' size
	// (51865 and up); English-only models (*.en) have 51864 and are
	// always decoded as English, with no language or task token.
	Multilingual bool
	// Languages are the language tokens a multilingual model's
	// config.json lists (lang_ids), in that order, with their codes
	// ("en" for <|en|>): the candidates of language detection.
	Languages []Language
}

// Language is one of a multilingual model's language tokens.
type Language struct {
	Code string
	ID   int
}

// languages reads the codes of the config's lang_ids from the
// tokenizer ("<|de|>" → "de").
func languages(t *tokenizer.Tokenizer, ids []int, vocab int) ([]Language, error) {
	out := make([]Language, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.Token(id)
		if !ok || id >= vocab || !strings.HasPrefix(tok, "<|") || !strings.HasSuffix(tok, "|>") || len(tok) < 5 {
			return nil, fmt.Errorf("%w: lang_ids entry %d is not a language token (%q)", ErrNotWhisper, id, tok)
		}
		out = append(out, Language{Code: tok[2 : len(tok)-2], ID: id})
	}
	return out, nil
}

// languageToken is the token of a language code among the model's
// languages.
func (m *Model) languageToken(code string) (int, bool) {
	for _, l := range m.Tokens.Languages {
		if strings.EqualFold(l.Code, code) {
			return l.ID, true
		}
	}
	return 0, false
}

func specialTokens(t *tokenizer.Tokenizer, vocab int) (Special, error) {
	var s Special
	var missing []string
	id := func(names ...string) int {
		for _, n := range names {
			if v, ok := t.TokenID(n); ok {
				return v
			}
		}
		missing = append(missing, names[0])
		return -1
	}
	s.EOT = id("<|endoftext|>")
	s.SOT = id("<|startoftranscript|>")
	s.SOTPrev = id("<|startofprev|>")
	s.SOTLM = id("<|startoflm|>")
	s.NoSpeech = id("<|nospeech|>", "<|nocaptions|>")
	s.NoTimestamps = id("<|notimestamps|>")
	s.Transcribe = id("<|transcribe|>")
	s.Translate = id("<|translate|>")
	if len(missing) > 0 {
		return s, fmt.Errorf("%w: tokenizer.json has no %v", ErrNotWhisper, missing)
	}
	s.TimestampBegin = s.NoTimestamps + 1
	if s.TimestampBegin >= vocab {
		return s, fmt.Errorf("%w: no timestamp tokens below the vocabulary size %d", ErrNotWhisper, vocab)
	}
	s.Multilingual = vocab >= 51865
	return s, nil
}

// suppressed is the set of tokens never sampled, as faster-whisper builds
// it for suppress_tokens=[-1]: the converter's suppress_ids (the
// non-speech symbols) and the special tokens that only a prompt holds.
func (m *Model) suppressed() []int {
	t := m.Tokens
	seen := map[int]bool{}
	var out []int
	for _, id := range append(append([]int(nil), m.Config.SuppressIDs...), t.Transcribe, t.Translate, t.SOT, t.SOTPrev, t.SOTLM, t.NoSpeech) {
		if id >= 0 && id < m.Dims.Vocab && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Text decodes the text tokens of ids (those below <|endoftext|>).
func (m *Model) Text(ids []int) string {
	text := make([]int, 0, len(ids))
	for _, id := range ids {
		if id < m.Tokens.EOT {
			text = append(text, id)
		}
	}
	return m.Tokenizer.Decode(text, false)
}
