package openai

import (
	"maps"
	"strings"

	"fusion/engine"
	"fusion/router/jsonkind"
)

// reasoningEfforts are the values of reasoning_effort and the share of
// the answer's token bound each leaves to reasoning ("none": no
// reasoning). The shares follow the common mapping of an effort to a
// thinking budget (about a fifth, a half, four fifths).
//
// Each also names the template variable reasoning_effort gpt-oss's
// harmony template reads (its system message's "Reasoning: low|medium|
// high", the only three it knows; harmony cannot turn reasoning off, so
// "none" and "minimal" ask for low), unless chat_template_kwargs sets it.
var reasoningEfforts = []struct {
	name     string
	share    float64
	template string
}{{"none", 0, "low"}, {"minimal", 0.1, "low"}, {"low", 0.2, "low"}, {"medium", 0.5, "medium"}, {"high", 0.8, "high"}, {"xhigh", 0.95, "high"}}

// applyThinking sets the request's thinking from enable_thinking,
// chat_template_kwargs.enable_thinking and reasoning_effort, after
// base.MaxTokens is known.
//
//   - enable_thinking (or the template variable of the same name) true
//     forces thinking mode: a hybrid template's generation prompt opens the
//     <think> block (engine.Request.StartThinking), as Anthropic's
//     thinking: enabled does; false turns thinking off.
//   - reasoning_effort "none" turns thinking off; any other effort forces
//     it and, when the answer has a token bound, spends at most that
//     effort's share of it on reasoning (engine.Request.ReasoningBudget),
//     after which the runner closes the block and the answer follows; it
//     also sets the template variable reasoning_effort (harmony's
//     "Reasoning:" line).
//
// Contradicting values (enable_thinking false with an effort, or true
// with "none") are a 400.
func (req *ChatRequest) applyThinking(base *engine.Request) *Error {
	enable := req.EnableThinking
	if v, ok := req.ChatTemplateKwargs["enable_thinking"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return invalidType("chat_template_kwargs.enable_thinking", "a boolean", jsonkind.OfValue(v))
		}
		if enable != nil && *enable != b {
			return invalidRequest("chat_template_kwargs.enable_thinking",
				"Invalid 'chat_template_kwargs.enable_thinking': %v contradicts 'enable_thinking': %v.", b, *enable)
		}
		enable = &b
	}
	share := -1.0 // no effort given
	if req.ReasoningEffort != nil {
		names := make([]string, len(reasoningEfforts))
		for i, e := range reasoningEfforts {
			names[i] = "'" + e.name + "'"
			if e.name == *req.ReasoningEffort {
				share = e.share
				if _, set := req.ChatTemplateKwargs["reasoning_effort"]; !set {
					base.ChatTemplateKwargs = maps.Clone(req.ChatTemplateKwargs)
					if base.ChatTemplateKwargs == nil {
						base.ChatTemplateKwargs = map[string]any{}
					}
					base.ChatTemplateKwargs["reasoning_effort"] = e.template
				}
			}
		}
		if share < 0 {
			return invalidRequest("reasoning_effort", "Invalid value: '%s'. Supported values are: %s.", *req.ReasoningEffort, strings.Join(names, ", "))
		}
		on := share > 0
		if enable != nil && *enable != on {
			return invalidRequest("reasoning_effort", "Invalid 'reasoning_effort': '%s' contradicts 'enable_thinking': %v.", *req.ReasoningEffort, *enable)
		}
		enable = &on
	}
	base.EnableThinking = enable
	if enable == nil || !*enable {
		return nil
	}
	base.StartThinking = true
	if share > 0 && base.MaxTokens > 0 {
		base.ReasoningBudget = max(1, int(share*float64(base.MaxTokens)))
	}
	return nil
}
