package runner

import (
	"encoding/json"
	"errors"
	"fmt"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/prompt"
)

// declaredTool is one function tool of a request.
type declaredTool struct {
	name   string
	params []byte // JSON Schema, or nil for any object
}

// declaredTools reads OpenAI-style tool definitions ({"type": "function",
// "function": {"name", "parameters"}}).
func declaredTools(tools []*chattemplate.Object) ([]declaredTool, error) {
	var out []declaredTool
	for i, t := range tools {
		fv, _ := t.Get("function")
		fn, ok := fv.(*chattemplate.Object)
		if !ok {
			return nil, fmt.Errorf("tools[%d]: not a function tool", i)
		}
		nv, _ := fn.Get("name")
		name, _ := nv.(string)
		if name == "" {
			return nil, fmt.Errorf("tools[%d].function.name: missing", i)
		}
		d := declaredTool{name: name}
		if pv, ok := fn.Get("parameters"); ok && pv != nil {
			b, err := json.Marshal(pv)
			if err != nil {
				return nil, fmt.Errorf("tools[%d].function.parameters: %w", i, err)
			}
			d.params = b
		}
		out = append(out, d)
	}
	return out, nil
}

// callFamily is the format a request's output is parsed in: the model's
// own (family), except that a forced tool choice on a model whose
// template has no tool-call format at all (parser.None: Gemma 3's) is
// written as one bare JSON call, {"name": …, "parameters": {…}}, which
// toolCallGrammar forces and the llama3_json parser reads (and gemma4_think
// as gemma4, whose calls the template defines). A family
// with reasoning but no calls (parser.Think) keeps its refusal: the JSON
// parser would return the reasoning as content.
func callFamily(family string, req *engine.Request) string {
	if req.ToolChoice.Forced() && req.Messages != nil {
		switch family {
		case parser.None:
			return parser.Llama3JSON
		case parser.Gemma4Think:
			// Gemma 4's thought channel without its calls (an operator's
			// parser setting): a forced call is still written, and read,
			// in Gemma 4's call syntax.
			return parser.Gemma4
		}
	}
	return family
}

// toolCallGrammar compiles the output a forced tool choice allows: one or
// more calls (at most maxCalls, or one when parallel calls are off) of the
// allowed tools in the family's call format, each call's arguments valid
// against that tool's parameters. JSON is compact (see package grammar);
// Gemma 4's arguments are in its own notation (grammar.GemmaArguments).
func toolCallGrammar(family string, tools []*chattemplate.Object, choice engine.ToolChoice, maxCalls int) (*grammar.Grammar, error) {
	decl, err := declaredTools(tools)
	if err != nil {
		return nil, &prompt.InvalidRequestError{Err: err}
	}
	if choice.NoParallel {
		maxCalls = 1
	}
	b := grammar.NewBuilder()
	type allowed struct {
		name string
		args grammar.Expr
	}
	var calls []allowed
	for i, d := range decl {
		if choice.Mode == engine.ToolNamed && d.name != choice.Name {
			continue
		}
		args := b.AnyObject()
		switch {
		case family == parser.Gemma4:
			args, err = b.GemmaArguments(d.params)
		case d.params != nil && family != parser.Qwen3Coder && family != parser.GLM45: // tagged parameters are built below
			args, err = b.ObjectSchema(d.params)
		}
		if err != nil {
			return nil, schemaError(fmt.Sprintf("tools[%d].function.parameters", i), err)
		}
		calls = append(calls, allowed{d.name, args})
	}
	if len(calls) == 0 {
		if choice.Mode == engine.ToolNamed {
			return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("tool_choice: no tool named %q among the request's tools", choice.Name)}
		}
		return nil, &prompt.InvalidRequestError{Err: errors.New("tool_choice: a tool call is required but the request declares no tools")}
	}
	// jsonCall is {"name": N, argsKey: A} over the allowed tools.
	jsonCall := func(argsKey string) grammar.Expr {
		var alts []grammar.Expr
		for _, c := range calls {
			alts = append(alts, b.Object(grammar.Prop{Key: "name", Value: b.JSONString(c.name)}, grammar.Prop{Key: argsKey, Value: c.args}))
		}
		return b.Choice(alts...)
	}
	var root grammar.Expr
	switch family {
	case parser.Qwen3Coder, parser.GLM45:
		// Qwen3-Coder's (and Qwen3.5's) <function=NAME><parameter=…>, or
		// GLM-4.5's NAME line and <arg_key>/<arg_value> pairs.
		head, tail, params := "<tool_call>\n<function=%s>\n", "</function>\n</tool_call>", b.XMLParameters
		if family == parser.GLM45 {
			head, tail, params = "<tool_call>%s\n", "</tool_call>", b.GLMParameters
		}
		var alts []grammar.Expr
		for i, d := range decl {
			if choice.Mode == engine.ToolNamed && d.name != choice.Name {
				continue
			}
			parts := []grammar.Expr{b.Literal(fmt.Sprintf(head, d.name))}
			if d.params != nil {
				ps, err := params(d.params)
				if err != nil {
					return nil, schemaError(fmt.Sprintf("tools[%d].function.parameters", i), err)
				}
				parts = append(parts, ps...)
			}
			alts = append(alts, b.Sequence(append(parts, b.Literal(tail))...))
		}
		root = b.Repeat(b.Literal("\n"), 1, maxCalls, b.Choice(alts...))
	case parser.Qwen3, parser.Hermes:
		root = b.Repeat(b.Literal("\n"), 1, maxCalls, b.Literal("<tool_call>\n"), jsonCall("arguments"), b.Literal("\n</tool_call>"))
	case parser.Llama3JSON:
		root = jsonCall("parameters") // one bare call: the format has no list
	case parser.Mistral:
		root = b.Sequence(b.Literal("[TOOL_CALLS]"), b.Array(jsonCall("arguments"), 1, maxCalls))
	case parser.MistralArgs:
		// Each call as its own [TOOL_CALLS]NAME[ARGS]{…}, as the template
		// writes them back.
		var alts []grammar.Expr
		for _, c := range calls {
			alts = append(alts, b.Sequence(b.Literal(c.name+"[ARGS]"), c.args))
		}
		root = b.Repeat(grammar.Expr{}, 1, maxCalls, b.Literal("[TOOL_CALLS]"), b.Choice(alts...))
	case parser.Phi4Mini:
		root = b.Sequence(b.Literal("<|tool_call|>"), b.Array(jsonCall("arguments"), 1, maxCalls), b.Literal("<|/tool_call|>"))
	case parser.Harmony:
		names, args := make([]string, len(calls)), make([]grammar.Expr, len(calls))
		for i, c := range calls {
			names[i], args[i] = c.name, c.args
		}
		root = harmonyCallGrammar(b, names, args)
	case parser.Gemma4:
		// As the template writes calls back: each in its own
		// <|tool_call>…<tool_call|>, one after the other.
		var alts []grammar.Expr
		for _, c := range calls {
			alts = append(alts, b.Sequence(b.Literal(c.name), c.args))
		}
		root = b.Repeat(grammar.Expr{}, 1, maxCalls, b.Literal("<|tool_call>call:"), b.Choice(alts...), b.Literal("<tool_call|>"))
	case parser.DeepSeekV3:
		var alts []grammar.Expr
		for _, c := range calls {
			alts = append(alts, b.Sequence(b.Literal("function<｜tool▁sep｜>"+c.name+"\n```json\n"), c.args))
		}
		one := b.Sequence(b.Literal("<｜tool▁call▁begin｜>"), b.Choice(alts...), b.Literal("\n```<｜tool▁call▁end｜>"))
		root = b.Sequence(b.Literal("<｜tool▁calls▁begin｜>"), b.Repeat(b.Literal("\n"), 1, maxCalls, one), b.Literal("<｜tool▁calls▁end｜>"))
	default:
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("tool_choice: this model's tool call format (%q) cannot be forced; use tool_choice auto", family)}
	}
	g, err := b.Build(root)
	if err != nil {
		return nil, schemaError("tools", err)
	}
	return g, nil
}

// schemaError is the caller's error for a schema the grammar refuses,
// naming the keyword when there is one.
func schemaError(where string, err error) error {
	var ue *grammar.UnsupportedError
	if errors.As(err, &ue) {
		return &prompt.InvalidRequestError{Err: fmt.Errorf("%s: the schema keyword %q at %q cannot be enforced: %w", where, ue.Keyword, ue.Path, err)}
	}
	return &prompt.InvalidRequestError{Err: fmt.Errorf("%s: %w", where, err)}
}

// callTokens puts a family's call markers into the grammar vocabulary as
// their text, so that a forced call writes them as the model does, with
// its special tokens, not spelled out in pieces: Gemma 4's <|tool_call>,
// <tool_call|> and <|"|> (the string delimiter; it cannot end a string
// early: a grammar string never holds a '"', see grammar.GemmaArguments,
// and a string that holds the text of a call marker is read as text by
// the output parser, which skips <|"|>-delimited strings), GLM-4.5's
// <tool_call> and <arg_key>/<arg_value> tags, Phi-4-mini's <|tool_call|>.
func (lm *loadedModel) callTokens(tokens [][]byte) {
	var markers []string
	switch lm.parser {
	case parser.Gemma4, parser.Gemma4Think:
		markers = []string{"<|tool_call>", "<tool_call|>", `<|"|>`}
	case parser.GLM45, parser.Phi4Mini:
		markers = parser.Markers(lm.parser)
	}
	tok := lm.text.Tokenizer()
	for _, m := range markers {
		if id, ok := tok.TokenID(m); ok && id < len(tokens) && !tok.IsEOS(id) {
			tokens[id] = []byte(m)
		}
	}
}
