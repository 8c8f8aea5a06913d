package runner

import (
	"errors"
	"fmt"

	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// constraint keeps a generation inside a grammar: before each step it
// masks the tokens that cannot continue the document, after it advances
// the matcher by the chosen token. While the model is still reasoning (the
// prompt opened a <think> block) it waits for </think>.
type constraint struct {
	vocab    *grammar.Vocab
	m        *grammar.Matcher
	bits     sample.Bitset
	waiting  bool // reasoning: unconstrained until thinkEnd
	thinkEnd int  // the </think> token id, or -1
}

// newConstraint compiles the request's response format; a schema the
// grammar cannot enforce is the caller's error, naming the keyword.
func newConstraint(lm *loadedModel, rf *engine.ResponseFormat, startInReasoning bool) (*constraint, error) {
	g := grammar.JSONObject()
	if rf.Schema != nil {
		var err error
		if g, err = grammar.Compile(rf.Schema); err != nil {
			var ue *grammar.UnsupportedError
			if errors.As(err, &ue) {
				return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("response_format: the schema keyword %q at %q cannot be enforced: %w", ue.Keyword, ue.Path, err)}
			}
			return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("response_format: %w", err)}
		}
	}
	v := lm.grammarVocab()
	end, ok := lm.text.Tokenizer().TokenID("</think>")
	if !ok {
		end = -1
	}
	return &constraint{
		vocab: v, m: g.NewMatcher(), bits: sample.NewBitset(v.Size()),
		waiting: startInReasoning && end >= 0, thinkEnd: end,
	}, nil
}

// mask returns the mask for the next step (nil while waiting).
func (c *constraint) mask() sample.Mask {
	if c.waiting {
		return nil
	}
	clear(c.bits)
	c.m.Mask(c.vocab, c.bits)
	return c.bits
}

// accept advances past the sampled token.
func (c *constraint) accept(id int) error {
	if c.waiting {
		c.waiting = id != c.thinkEnd
		return nil
	}
	return c.m.Accept(c.vocab, id)
}

// grammarVocab builds the model's vocabulary as raw token bytes once, for
// every constrained request to share: special tokens are never allowed,
// end-of-generation ids only once the document is complete.
func (lm *loadedModel) grammarVocab() *grammar.Vocab {
	lm.vocabOnce.Do(func() {
		tok := lm.text.Tokenizer()
		tokens := make([][]byte, lm.model.VocabSize())
		for id := range tokens {
			if tok.IsSpecial(id) {
				continue
			}
			if b, ok := tok.TokenBytes(id); ok && len(b) > 0 {
				tokens[id] = b
			}
		}
		lm.vocab = grammar.NewVocab(tokens, tok.EOS())
	})
	return lm.vocab
}
