package runner

import "fusion/engine/sample"

// thinkBudget bounds a generation's reasoning tokens (Anthropic's
// thinking.budget_tokens): it follows <think> and </think> tokens and,
// once the budget is spent inside a block, masks everything but </think>.
type thinkBudget struct {
	open, close int // token ids of <think> and </think>
	budget      int
	spentTokens int
	inside      bool
	end         sample.Bitset // only </think>
}

// newThinkBudget returns nil when the model has no </think> token.
func newThinkBudget(lm *loadedModel, budget int, startInReasoning bool) *thinkBudget {
	tok := lm.text.Tokenizer()
	closeID, ok := tok.TokenID("</think>")
	if !ok {
		return nil
	}
	openID, ok := tok.TokenID("<think>")
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
