package runner

import (
	"slices"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/grammar"
	"fusion/engine/parser"
)

// newOutputParser makes the parser that splits a request's generated text
// into content, reasoning and tool calls. Raw prompts (legacy completions)
// get none: their text is returned exactly as the model wrote it.
// renderedPrompt tells whether the template left a <think> block open.
func newOutputParser(family string, req *engine.Request, renderedPrompt string) (parser.Parser, error) {
	switch {
	case req.Messages == nil:
		family = parser.None
	case req.ToolChoice.Mode == engine.ToolNone && family != parser.Harmony:
		// (Harmony's channels are the format itself: its parser stays.)
		// No tool calls: call-like text stays content; reasoning is still
		// split off where the family has it.
		switch {
		case family == parser.Gemma4:
			family = parser.Gemma4Think
		case slices.Contains(parser.Markers(family), "<think>"):
			family = parser.Think
		default:
			family = parser.None
		}
	}
	opts := parser.Options{
		Tools:            toolNames(req.Tools),
		StartInReasoning: parser.StartInReasoning(renderedPrompt),
	}
	if family == parser.Qwen3Coder || family == parser.GLM45 {
		// Which parameters are strings, so their text stays a string.
		if decl, err := declaredTools(req.Tools); err == nil {
			opts.ParamTypes = map[string]map[string]string{}
			for _, d := range decl {
				if d.params != nil {
					opts.ParamTypes[d.name] = grammar.XMLParamTypes(d.params)
				}
			}
		}
	}
	p, err := parser.New(family, opts)
	if err == nil && family == parser.Harmony {
		// A prompt that ends inside a message: the output is its body.
		p.Add(parser.HarmonyOpenHeader(renderedPrompt))
	}
	return p, err
}

// toolNames lists the function names of OpenAI-style tool definitions
// ({"type": "function", "function": {"name": ...}}).
func toolNames(tools []*chattemplate.Object) []string {
	var names []string
	for _, t := range tools {
		fn, _ := t.Get("function")
		if obj, ok := fn.(*chattemplate.Object); ok {
			if name, ok := obj.Get("name"); ok {
				if s, ok := name.(string); ok {
					names = append(names, s)
				}
			}
		}
	}
	return names
}
