package tokenizer

import (
	"encoding/json"
	"fmt"
)

// pairPiece is one piece of a post-processor's pair template: special
// token ids, or sequence A (seq 0) or B (seq 1), with the token type id
// its tokens get.
type pairPiece struct {
	ids    []int
	seq    int // -1: special tokens
	typeID int
}

type pairTemplateJSON struct {
	Type string `json:"type"`
	Pair []struct {
		SpecialToken *struct {
			ID     string `json:"id"`
			TypeID int    `json:"type_id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID     string `json:"id"`
			TypeID int    `json:"type_id"`
		} `json:"Sequence"`
	} `json:"pair"`
	SpecialTokens map[string]templateTokenJSON `json:"special_tokens"`
}

// buildPairTemplate reads the pair template of a TemplateProcessing
// post-processor (BERT's [CLS] A [SEP] B [SEP]); nil when there is none.
func buildPairTemplate(raw json.RawMessage) ([]pairPiece, error) {
	if isNull(raw) {
		return nil, nil
	}
	var cfg pairTemplateJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	if cfg.Type != "TemplateProcessing" || len(cfg.Pair) == 0 {
		return nil, nil
	}
	var out []pairPiece
	seen := [2]bool{}
	for i, p := range cfg.Pair {
		switch {
		case p.Sequence != nil:
			seq := map[string]int{"A": 0, "B": 1}
			s, ok := seq[p.Sequence.ID]
			if !ok || seen[s] {
				return nil, fmt.Errorf("TemplateProcessing: pair[%d]: sequence %q", i, p.Sequence.ID)
			}
			seen[s] = true
			out = append(out, pairPiece{seq: s, typeID: p.Sequence.TypeID})
		case p.SpecialToken != nil:
			tok, ok := cfg.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("TemplateProcessing: pair[%d]: special token %q is not in special_tokens", i, p.SpecialToken.ID)
			}
			out = append(out, pairPiece{ids: tok.IDs, seq: -1, typeID: p.SpecialToken.TypeID})
		default:
			return nil, fmt.Errorf("TemplateProcessing: pair[%d]: neither SpecialToken nor Sequence", i)
		}
	}
	if !seen[0] || !seen[1] {
		return nil, fmt.Errorf("TemplateProcessing: the pair template lacks sequence A or B")
	}
	return out, nil
}

// HasPairTemplate reports whether the tokenizer can encode text pairs
// (its post-processor has a pair template).
func (t *Tokenizer) HasPairTemplate() bool { return t.pair != nil }

// EncodePairWithin encodes a text pair with the post-processor's pair
// template (BERT: [CLS] a [SEP] b [SEP]) and returns the ids and their
// token type ids, at most maxLen in all (≤ 0: no limit). Cutting follows
// HF tokenizers' longest_first strategy: the longer text gives up tokens
// first, from its end. truncated reports a cut. It panics without a pair
// template (see HasPairTemplate).
func (t *Tokenizer) EncodePairWithin(a, b string, maxLen int) (ids, types []int, truncated bool) {
	if t.pair == nil {
		panic("tokenizer: no pair template")
	}
	seqs := [2][]int{t.Encode(a, false), t.Encode(b, false)}
	if maxLen > 0 {
		special := 0
		for _, p := range t.pair {
			special += len(p.ids)
		}
		room := max(0, maxLen-special)
		if n0, n1 := longestFirst(len(seqs[0]), len(seqs[1]), room); n0 < len(seqs[0]) || n1 < len(seqs[1]) {
			seqs[0], seqs[1], truncated = seqs[0][:n0], seqs[1][:n1], true
		}
	}
	for _, p := range t.pair {
		part := p.ids
		if p.seq >= 0 {
			part = seqs[p.seq]
		}
		ids = append(ids, part...)
		for range part {
			types = append(types, p.typeID)
		}
	}
	return ids, types, truncated
}

// longestFirst is how many tokens of two sequences of n0 and n1 tokens
// HF tokenizers keeps under a budget of room with longest_first: the
// shorter one whole if the longer still gets at least as many, else half
// the budget each (the odd token to the longer, the second on a tie).
func longestFirst(n0, n1, room int) (int, int) {
	if n0+n1 <= room {
		return n0, n1
	}
	swap := n0 > n1
	if swap {
		n0, n1 = n1, n0
	}
	// n0 ≤ n1
	if n0 > room {
		n1 = n0
	} else {
		n1 = max(n0, room-n0)
	}
	if n0+n1 > room {
		n0 = room / 2
		n1 = n0 + room%2
	}
	if swap {
		n0, n1 = n1, n0
	}
	return n0, n1
}
