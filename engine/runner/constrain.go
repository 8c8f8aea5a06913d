package runner

import (
	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/sample"
)

// thinking says where a constrained generation stands toward reasoning
// when it starts.
type thinking int

const (
	thinkingOff    thinking = iota // the grammar applies from the first token
	thinkingMay                    // the model may open <think> first
	thinkingInside                 // the prompt opened <think>
)

// phase is where a constrained generation is.
type phase int

const (
	phaseGrammar    phase = iota // the grammar applies
	phaseMayThink                // first token: <think> or the grammar's start
	phaseThinkName               // after Gemma 4's <|channel>: its name, "thought\n"
	phaseThinking                // reasoning, free until </think>
	phaseAfterThink              // after </think>: whitespace or the grammar's start
	phaseHeader                  // after gpt-oss's analysis message: the final message's header
)

// maxSpaces bounds the whitespace tokens taken between </think> and the
// document (Qwen3 writes one "\n\n").
const maxSpaces = 2

// constraint keeps a generation inside a grammar: before each step it
// masks the tokens that cannot continue the document, after it advances
// the matcher by the chosen token. With thinking, the document starts
// after </think>: reasoning in between is free, except that it cannot end
// the generation and is closed while there are still enough tokens left
// for the shortest document.
type constraint struct {
	vocab *grammar.Vocab
	m     *grammar.Matcher
	bits  sample.Bitset
	phase phase

	thinkOpen  int           // the <think> token id, or -1
	thinkClose int           // the </think> token id, or -1
	reasoning  sample.Bitset // what reasoning may use: no stop, no <think>, no call tags
	closeOnly  sample.Bitset // only </think>
	spaces     sample.Bitset // whitespace-only tokens
	spacesUsed int

	// Gemma 4 names its channel after the opening token, as its template
	// writes it: the name is forced (nil for other families).
	name     *grammar.Matcher
	nameCost int // bytes of the name

	// After gpt-oss's analysis message (<|end|>) the document is the
	// final message's body: its header is forced first (nil for other
	// families).
	header     *grammar.Matcher
	headerCost int // an upper bound on the header's tokens
}

// gemmaThoughtName follows <|channel> in Gemma 4's thought channel.
const gemmaThoughtName = "thought\n"

var gemmaThoughtGrammar = literalGrammar(gemmaThoughtName)

// harmonyFinal is the header that follows gpt-oss's analysis message and
// opens its final message, in the grammar vocabulary's spelling.
var harmonyFinal = harmonyLiteral("<|start|>assistant" + harmonyFinalHeader)

var harmonyFinalGrammar = literalGrammar(harmonyFinal)

// literalGrammar matches s, a constant.
func literalGrammar(s string) *grammar.Grammar {
	b := grammar.NewBuilder()
	g, err := b.Build(b.Literal(s))
	if err != nil {
		panic(err)
	}
	return g
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

// newConstraint starts matching g from think; stops are the token ids that
// end the generation, which reasoning may not use. Without <think> and
// </think> tokens the grammar applies at once.
func newConstraint(lm *loadedModel, g *grammar.Grammar, think thinking, stops []int) *constraint {
	v := lm.grammarVocab()
	c := &constraint{vocab: v, m: g.NewMatcher(), bits: sample.NewBitset(v.Size()), spaces: lm.spaces}
	tok := lm.text.Tokenizer()
	openTag, closeTag := thinkTags(lm.parser)
	open, okOpen := tok.TokenID(openTag)
	closeID, okClose := tok.TokenID(closeTag)
	if !okOpen {
		open = -1
	}
	if !okClose {
		closeID = -1
	}
	c.thinkOpen, c.thinkClose = open, closeID
	switch {
	case think == thinkingInside && okClose:
		c.phase = phaseThinking
	case think == thinkingMay && okOpen && okClose:
		c.phase = phaseMayThink
	default:
		return c
	}
	c.reasoning = append(sample.Bitset(nil), lm.reasoning...)
	for _, id := range stops {
		unset(c.reasoning, id)
	}
	unset(c.reasoning, open)
	c.reasoning.Set(closeID)
	c.closeOnly = sample.NewBitset(v.Size())
	c.closeOnly.Set(closeID)
	if openTag == "<|channel>" && c.phase == phaseMayThink {
		c.name, c.nameCost = gemmaThoughtGrammar.NewMatcher(), len(gemmaThoughtName)
	}
	if lm.parser == parser.Harmony {
		c.header, c.headerCost = harmonyFinalGrammar.NewMatcher(), len(harmonyFinal)
	}
	return c
}

// mask returns the mask for the next step. left is how many tokens the
// generation may still produce, this one included: the document is
// finished one token before, so that the end-of-generation token fits and
// a generation cut by max_tokens still returns whole JSON. Reasoning is
// opened or continued only while </think>, the shortest document and the
// end still fit after this token.
func (c *constraint) mask(left int) sample.Mask {
	if c.phase == phaseThinkName {
		c.name.Mask(c.vocab, c.bits)
		return c.bits
	}
	switch c.phase {
	case phaseThinking:
		if left < c.m.Remaining()+3+c.headerCost {
			return c.closeOnly
		}
		return c.reasoning
	case phaseHeader:
		c.header.Mask(c.vocab, c.bits)
		return c.bits
	}
	c.m.SetBudget(left - 1)
	c.m.Mask(c.vocab, c.bits)
	// The think tags would be read as reasoning by the output parser, even
	// inside a JSON string: the document spells them with other tokens.
	unset(c.bits, c.thinkOpen)
	unset(c.bits, c.thinkClose)
	switch c.phase {
	case phaseMayThink:
		if left >= c.m.Remaining()+3+c.nameCost {
			c.bits.Set(c.thinkOpen)
		}
	case phaseAfterThink:
		if c.spacesUsed < maxSpaces && left-1 >= c.m.Remaining()+1 {
			for i, w := range c.spaces {
				c.bits[i] |= w
			}
		}
	}
	return c.bits
}

// accept advances past the sampled token.
func (c *constraint) accept(id int) error {
	switch c.phase {
	case phaseThinking:
		if id == c.thinkClose {
			c.phase = phaseAfterThink
			if c.header != nil {
				c.phase = phaseHeader
			}
		}
		return nil
	case phaseHeader:
		if err := c.header.Accept(c.vocab, id); err != nil {
			return err
		}
		if c.header.Done() {
			c.phase = phaseGrammar
		}
		return nil
	case phaseThinkName:
		if id == c.thinkClose { // a spent reasoning budget closes it at once
			c.phase = phaseAfterThink
			return nil
		}
		if err := c.name.Accept(c.vocab, id); err != nil {
			return err
		}
		if c.name.Done() {
			c.phase = phaseThinking
		}
		return nil
	case phaseMayThink:
		if id == c.thinkOpen {
			c.phase = phaseThinking
			if c.name != nil {
				c.phase = phaseThinkName
			}
			return nil
		}
	case phaseAfterThink:
		if c.spacesUsed < maxSpaces && c.spaces.Allowed(id) {
			c.spacesUsed++
			return nil
		}
	}
	c.phase = phaseGrammar
	return c.m.Accept(c.vocab, id)
}

// grammarVocab builds the model's vocabulary as raw token bytes once, for
// every constrained request to share: special tokens are never allowed,
// end-of-generation ids only once the document is complete. With it come
// the whitespace-only tokens and the tokens reasoning may use (every
// token of the tokenizer but the special ones and the family's structure
// markers other than </think>: the output parser takes a call tag inside
// the reasoning as its end, so a constrained answer reasoning first must
// not write one before </think>).
func (lm *loadedModel) grammarVocab() *grammar.Vocab {
	lm.vocabOnce.Do(func() {
		tok := lm.text.Tokenizer()
		n := lm.model.VocabSize()
		tokens := make([][]byte, n)
		lm.spaces, lm.reasoning = sample.NewBitset(n), sample.NewBitset(n)
		for id := range tokens {
			if tok.IsSpecial(id) {
				continue
			}
			if b, ok := tok.TokenBytes(id); ok && len(b) > 0 {
				tokens[id] = b
				lm.reasoning.Set(id)
				if isSpace(b) {
					lm.spaces.Set(id)
				}
			}
		}
		_, closeTag := thinkTags(lm.parser)
		for _, m := range parser.Markers(lm.parser) {
			if id, ok := tok.TokenID(m); ok && m != closeTag {
				unset(lm.reasoning, id)
			}
		}
		lm.harmonyTokens(tokens)
		lm.callTokens(tokens)
		lm.vocab = grammar.NewVocab(tokens, tok.EOS())
	})
	return lm.vocab
}

// unset disallows id in b (nothing for an id out of range).
func unset(b sample.Bitset, id int) {
	if id >= 0 && id/64 < len(b) {
		b[id/64] &^= 1 << (id % 64)
	}
}

// isSpace reports whether b is JSON whitespace only.
func isSpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\n' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}
