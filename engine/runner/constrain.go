package runner

import (
	"fusion/engine"
	"fusion/engine/grammar"
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

// responseFormatGrammar compiles a request's response format; a schema
// the grammar cannot enforce is the caller's error, naming the keyword.
func responseFormatGrammar(rf *engine.ResponseFormat) (*grammar.Grammar, error) {
	if rf.Schema == nil {
		return grammar.JSONObject(), nil
	}
	g, err := grammar.Compile(rf.Schema)
	if err != nil {
		return nil, schemaError("response_format", err)
	}
	return g, nil
}

// newConstraint starts matching g; with startInReasoning the constraint
// waits for </think>.
func newConstraint(lm *loadedModel, g *grammar.Grammar, startInReasoning bool) *constraint {
	v := lm.grammarVocab()
	end, ok := lm.text.Tokenizer().TokenID("</think>")
	if !ok {
		end = -1
	}
	return &constraint{
		vocab: v, m: g.NewMatcher(), bits: sample.NewBitset(v.Size()),
		waiting: startInReasoning && end >= 0, thinkEnd: end,
	}
}

// mask returns the mask for the next step (nil while waiting). left is
// how many tokens the generation may still produce, this one included: the
// document is finished one token before, so that the end-of-generation
// token fits and a generation cut by max_tokens still returns whole JSON.
func (c *constraint) mask(left int) sample.Mask {
	if c.waiting {
		return nil
	}
	c.m.SetBudget(left - 1)
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
