package modelfile

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// TokenIDs is a token id field that config files spell as null, one
// integer, or a list of integers (eos_token_id of Llama 3 and Qwen3).
type TokenIDs []int

// UnmarshalJSON accepts null, an integer or a list of integers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*t = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return fmt.Errorf("token ids: %w", err)
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("token id: %w", err)
	}
	*t = TokenIDs{id}
	return nil
}

// check rejects negative ids and, when vocab > 0, ids past the vocabulary.
func (t TokenIDs) check(field string, vocab int) error {
	for _, id := range t {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return fmt.Errorf("%w: %s %d is outside the vocabulary of %d", ErrInvalidConfig, field, id, vocab)
		}
	}
	return nil
}

// union returns the ids of a followed by those of b not already present.
func union(a, b []int) []int {
	out := append([]int(nil), a...)
	for _, id := range b {
		dup := false
		for _, x := range out {
			if x == id {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, id)
		}
	}
	return out
}
