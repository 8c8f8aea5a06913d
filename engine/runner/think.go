package runner

import (
	"fusion/engine/parser"
	"fusion/engine/sample"
)

// thinkBudget bounds a generation's reasoning tokens (Anthropic's
// thinking.budget_tokens): it follows <think> and </think> tokens (Gemma
// 4's <|channel> and <channel|>, see thinkTags) and, once the budget is
// spent inside a block, masks everything but the closing one.
type thinkBudget struct {
	open, close int // token ids of <think> and </think>
	budget      int
	spentTokens int
	inside      bool
	end         sample.Bitset // only </think>
}

// newThinkBudget returns nil when the model has no closing token.
func newThinkBudget(lm *loadedModel, budget int, startInReasoning bool) *thinkBudget {
	tok := lm.text.Tokenizer()
	openTag, closeTag := thinkTags(lm.parser)
	closeID, ok := tok.TokenID(closeTag)
	if !ok {
		return nil
	}
	openID, ok := tok.TokenID(openTag)
	if !ok {
		openID = -1
	}
	end := sample.NewBitset(lm.model.VocabSize())
	end.Set(closeID)
	return &thinkBudget{open: openID, close: closeID, budget: budget, inside: startInReasoning, end: end}
}

// spent reports whether the next token must close the reasoning.
func (b *thinkBudget) spent() bool { return b.inside && b.spentTokens >= b.budget }

// accept follows a generated token.
func (b *thinkBudget) accept(id int) {
	switch {
	case id == b.open:
		b.inside = true
	case id == b.close:
		b.inside = false
	case b.inside:
		b.spentTokens++
	}
}

// thinkTags are the tokens that open and close a family's reasoning:
// <think> and </think>, Mistral's [THINK] and [/THINK] (Magistral,
// Ministral 3 Reasoning), or Gemma 4's thought channel, which its template
// writes <|channel>thought\n…<channel|> (the model names the channel
// after the opening token).
func thinkTags(family string) (open, close string) {
	switch family {
	case parser.Gemma4, parser.Gemma4Think:
		return "<|channel>", "<channel|>"
	case parser.Mistral, parser.MistralArgs:
		return "[THINK]", "[/THINK]"
	case parser.Harmony:
		// gpt-oss's analysis message: only the prompt opens it
		// (harmonyOpen), <|end|> closes it.
		return "", "<|end|>"
	}
	return "<think>", "</think>"
}
