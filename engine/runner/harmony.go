package runner

import (
	"slices"
	"strings"

	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// gpt-oss's harmony format (parser.Harmony) writes its structure with
// special tokens (<|channel|>, <|message|>, <|constrain|>), which the
// grammar vocabulary leaves out. A forced tool call must write some of
// them, so for this family the grammar sees each of those tokens as a NUL
// byte followed by its text: a literal spelled the same way matches it,
// and nothing else can, since a JSON document never holds a raw NUL (so
// the tokens cannot slip into the arguments' strings). The tokens that
// end a generation (<|call|>, <|return|>) stay end-of-generation ids.
const harmonyMarkerLead = "\x00"

// harmonyLiteral is s with every harmony marker spelled as the grammar
// vocabulary spells the special token.
func harmonyLiteral(s string) string {
	for _, m := range parser.Markers(parser.Harmony) {
		s = strings.ReplaceAll(s, m, harmonyMarkerLead+m)
	}
	return s
}

// harmonyTokens puts the harmony markers that do not end a generation
// into the grammar vocabulary tokens (see harmonyMarkerLead), and takes out
// the ordinary tokens that hold a NUL byte (byte-level vocabularies have
// one), so that only the special tokens can write a marker literal.
func (lm *loadedModel) harmonyTokens(tokens [][]byte) {
	if lm.parser != parser.Harmony {
		return
	}
	for id, b := range tokens {
		if strings.Contains(string(b), harmonyMarkerLead) {
			tokens[id] = nil
		}
	}
	tok := lm.text.Tokenizer()
	for _, m := range parser.Markers(parser.Harmony) {
		if id, ok := tok.TokenID(m); ok && id < len(tokens) && !tok.IsEOS(id) {
			tokens[id] = []byte(harmonyLiteral(m))
		}
	}
}

// harmonyCallGrammar is the forced tool call of a harmony model: the
// header a call takes, to=functions.NAME with the json content type, and
// the arguments. The call token that follows ends the generation, so
// there is one call per answer whatever parallel_tool_calls says.
func harmonyCallGrammar(b *grammar.Builder, names []string, args []grammar.Expr) grammar.Expr {
	alts := make([]grammar.Expr, len(names))
	for i, n := range names {
		alts[i] = b.Sequence(b.Literal(harmonyLiteral(n+" <|constrain|>json<|message|>")), args[i])
	}
	return b.Sequence(b.Literal(harmonyLiteral("<|channel|>commentary to=functions.")), b.Choice(alts...))
}

// Headers a prompt may end with, opening a message the model continues.
const (
	harmonyFinalHeader    = "<|channel|>final<|message|>"
	harmonyAnalysisHeader = "<|channel|>analysis<|message|>"
)

// harmonyOpen ends the prompt of a harmony model inside an opened message
// where the request says what the answer starts with, and returns the
// header it added ("" for none): a request that asks the answer to start
// with reasoning (StartThinking: Anthropic's thinking enabled, OpenAI's
// reasoning_effort) opens the analysis message — with a response format,
// the constraint then forces the final message's header after its <|end|>
// and the document is that message's body; a structured answer without it
// opens the final message, so that the grammar's document is its body. A
// harmony prompt otherwise ends with "<|start|>assistant", where the model
// chooses its channel.
func harmonyOpen(lm *loadedModel, req *engine.Request, p *prompt.Result) string {
	if lm.parser != parser.Harmony || req.Messages == nil || req.ToolChoice.Forced() || !strings.HasSuffix(p.Prompt, "<|start|>assistant") {
		return ""
	}
	var header string
	switch {
	case req.StartThinking && (req.EnableThinking == nil || *req.EnableThinking):
		header = harmonyAnalysisHeader
	case req.ResponseFormat != nil:
		header = harmonyFinalHeader
	default:
		return ""
	}
	p.Prompt += header
	p.Tokens = slices.Concat(p.Tokens, lm.text.Tokenizer().Encode(header, false))
	p.Count = len(p.Tokens)
	return header
}

// harmonyThinkBudget bounds the reasoning of a harmony answer whose prompt
// opened the analysis message: once the budget is spent the next token is
// <|end|>, which closes the message (the model then opens its answer). A
// later analysis message of the same answer is not counted.
func harmonyThinkBudget(lm *loadedModel, budget int, opened string) *thinkBudget {
	if opened != harmonyAnalysisHeader {
		return nil
	}
	end, ok := lm.text.Tokenizer().TokenID("<|end|>")
	if !ok {
		return nil
	}
	mask := sample.NewBitset(lm.model.VocabSize())
	mask.Set(end)
	return &thinkBudget{open: -1, close: end, budget: budget, inside: true, end: mask}
}
