package runner

import (
	"slices"
	"strings"

	"fusion/engine"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/prompt"
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

// harmonyFinalHeader opens the final message.
const harmonyFinalHeader = "<|channel|>final<|message|>"

// harmonyOpenFinal ends the prompt of a structured answer (response_format)
// of a harmony model inside an opened final message, so that the
// grammar's document is that message's body; it reports whether it did.
// (A harmony prompt ends with "<|start|>assistant", where the model would
// choose its channel.)
func harmonyOpenFinal(lm *loadedModel, req *engine.Request, p *prompt.Result) bool {
	if lm.parser != parser.Harmony || req.Messages == nil || req.ResponseFormat == nil || req.ToolChoice.Forced() ||
		!strings.HasSuffix(p.Prompt, "<|start|>assistant") {
		return false
	}
	p.Prompt += harmonyFinalHeader
	p.Tokens = slices.Concat(p.Tokens, lm.text.Tokenizer().Encode(harmonyFinalHeader, false))
	p.Count = len(p.Tokens)
	return true
}
