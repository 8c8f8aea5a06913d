package whisper

import (
	"fmt"

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
