package chattemplate

// Per-family conversation generators for the parity corpus. Each knows
// what its template accepts, and produces a share of inputs it rejects.

// enableThinking sets enable_thinking to true or false, or leaves it
// undefined.
func (g *gen) enableThinking(extra map[string]any) {
	switch g.intn(3) {
	case 0:
		extra["enable_thinking"] = true
	case 1:
		extra["enable_thinking"] = false
	}
}

// thinkingToolsCase starts a case of a family whose template takes
// enable_thinking and tools: the flag set or left undefined, tools or
// not, a generation prompt most of the time.
func (g *gen) thinkingToolsCase(family, eos string) parityCase {
	c := parityCase{family: family, eos: eos}
	c.input.Extra = map[string]any{}
	g.enableThinking(c.input.Extra)
	c.input.Tools = g.toolsOrNone()
	c.input.AddGenerationPrompt = g.chance(0.7)
	return c
}

// toolsOrNone returns nil (Python None), a few tools, or rarely none.
func (g *gen) toolsOrNone() []*Object {
	switch n := g.intn(10); {
	case n < 4:
		return nil
	case n < 9:
		return g.tools()
	default:
		return []*Object{}
	}
}

// qwen3Case builds a Qwen3 conversation: systems, multi-turn, reasoning in
// reasoning_content or inline <think>, parallel tool calls and grouped
// tool results.
func (g *gen) qwen3Case() parityCase {
	c := g.thinkingToolsCase("qwen3", "<|im_end|>")

	var msgs []*Object
	if g.chance(0.6) {
		msgs = append(msgs, msg("system", g.text()))
	}
	turns := g.between(1, 4)
	for t := range turns {
		if t > 0 && g.chance(0.1) {
			msgs = append(msgs, msg("system", g.text()))
		}
		msgs = append(msgs, g.user())
		if t == turns-1 && g.chance(0.5) {
			break
		}
		msgs = append(msgs, g.qwen3Assistant()...)
	}
	c.input.Messages = msgs

	switch g.intn(30) {
	case 0:
		c.note = "last user message without content"
		last := lastWithRole(msgs, "user")
		last.Delete("content")
		c.expect = expectInvalid
	case 1:
		c.note = "assistant tool call with null content"
		msgs = append(msgs, NewObject("role", "assistant", "content", nil,
			"tool_calls", []any{g.toolCall(false)}))
		c.input.Messages = msgs
		c.expect = expectInvalid
	case 2:
		c.note = "no messages"
		c.input.Messages = []*Object{}
		c.expect = expectInvalid
	}
	return c
}

func lastWithRole(msgs []*Object, role string) *Object {
	for i := len(msgs) - 1; i >= 0; i-- {
		if r, _ := msgs[i].Get("role"); r == role {
			return msgs[i]
		}
	}
	return nil
}

// qwen3Assistant returns an assistant turn, possibly with tool calls, their
// results and a final answer.
func (g *gen) qwen3Assistant() []*Object {
	answer := g.text()
	reasoning := g.text()
	switch g.intn(5) {
	case 0:
		return []*Object{msg("assistant", answer)}
	case 1:
		return []*Object{msg("assistant", g.thinkInline(reasoning, answer))}
	case 2:
		return []*Object{msg("assistant", answer).Set("reasoning_content", reasoning)}
	case 3:
		return []*Object{msg("assistant", g.thinkInline(reasoning, answer)).Set("reasoning_content", nil)}
	}

	content := ""
	switch g.intn(3) {
	case 0:
		content = answer
	case 1:
		content = g.thinkInline(reasoning, answer)
	}
	calls := make([]any, g.between(1, 3))
	for i := range calls {
		call := g.toolCall(g.chance(0.4))
		if g.chance(0.2) { // the flat form, without the "function" wrapper
			fn, _ := call.Get("function")
			call = fn.(*Object)
		}
		calls[i] = call
	}
	a := msg("assistant", content).Set("tool_calls", calls)
	if g.chance(0.3) {
		a.Set("reasoning_content", reasoning)
	}
	out := []*Object{a}
	for range calls {
		out = append(out, NewObject("role", "tool", "tool_call_id", g.callID(), "content", g.text()))
	}
	if g.chance(0.6) {
		out = append(out, msg("assistant", g.text()))
	}
	return out
}

// llama32Case builds a conversation for the Llama 3.x instruct template
// with tools: tools in the first user message or in the system turn,
// custom_tools, date_string, one tool call per message, ipython results.
func (g *gen) llama32Case() parityCase {
	c := parityCase{family: "llama3_2", bos: "<|begin_of_text|>", eos: "<|eot_id|>"}
	extra := map[string]any{}
	c.input.Extra = extra
	c.input.AddGenerationPrompt = g.chance(0.7)
	switch g.intn(3) {
	case 0:
		extra["tools_in_user_message"] = true
	case 1:
		extra["tools_in_user_message"] = false
	}
	switch g.intn(3) {
	case 0:
		extra["date_string"] = "26 Jul 2024"
	case 1:
		extra["date_string"] = pick(g, []string{"01 Jan 2025", "31 Dec 1999", "29 Feb 2028"})
	}
	if g.chance(0.1) {
		extra["custom_tools"] = g.tools()
	} else {
		c.input.Tools = g.toolsOrNone()
	}

	var msgs []*Object
	if g.chance(0.6) {
		msgs = append(msgs, msg("system", g.text()))
	}
	turns := g.between(1, 4)
	for t := range turns {
		msgs = append(msgs, msg("user", g.text()))
		if t == turns-1 && g.chance(0.5) {
			break
		}
		msgs = append(msgs, g.llamaAssistant()...)
	}
	c.input.Messages = msgs

	_, custom := extra["custom_tools"]
	toolsInUser := extra["tools_in_user_message"] != false
	hasTools := c.input.Tools != nil || custom
	switch g.intn(20) {
	case 0:
		c.note = "two tool calls in one message"
		msgs = append(msgs, NewObject("role", "assistant", "tool_calls",
			[]any{g.toolCall(false), g.toolCall(true)}))
		c.input.Messages = msgs
		c.expect = expectRaise
	case 1:
		c.note = "empty tool_calls"
		msgs = append(msgs, NewObject("role", "assistant", "content", "", "tool_calls", []any{}))
		c.input.Messages = msgs
		c.expect = expectRaise
	case 2:
		if hasTools && toolsInUser {
			c.note = "tools but no user message"
			c.input.Messages = []*Object{msg("system", g.text())}
			c.expect = expectRaise
		}
	case 3:
		c.note = "tool_calls null"
		msgs = append(msgs, NewObject("role", "assistant", "tool_calls", nil))
		c.input.Messages = msgs
		c.expect = expectInvalid
	}
	return c
}

// llamaAssistant returns an assistant answer, or a single tool call with
// its result(s) and maybe a final answer.
func (g *gen) llamaAssistant() []*Object {
	if g.chance(0.5) {
		var content any = g.text()
		if g.chance(0.1) {
			content = nil // rendered as "None" through trim
		}
		return []*Object{msg("assistant", content)}
	}
	a := NewObject("role", "assistant")
	switch g.intn(3) {
	case 0:
		a.Set("content", "")
	case 1:
		a.Set("content", nil)
	}
	a.Set("tool_calls", []any{g.toolCall(g.chance(0.3))})
	out := []*Object{a}
	for range g.between(1, 2) {
		var content any
		switch g.intn(4) {
		case 0:
			content = g.object(2)
		case 1:
			content = []any{g.jsonValue(1), g.text()}
		default:
			content = g.text()
		}
		out = append(out, msg(pick(g, []string{"tool", "ipython"}), content))
	}
	if g.chance(0.5) {
		out = append(out, msg("assistant", g.text()))
	}
	return out
}

// llama31Case targets the short Llama 3.1 template: role headers and
// trimmed content of any type (str() of None, numbers, content parts).
func (g *gen) llama31Case() parityCase {
	c := parityCase{family: "llama3_1", bos: "<|begin_of_text|>", eos: "<|eot_id|>"}
	c.input.AddGenerationPrompt = g.chance(0.6)
	n := g.between(1, 8)
	for range n {
		role := pick(g, []string{"system", "user", "user", "assistant", "assistant", "tool"})
		var content any
		switch g.intn(12) {
		case 0:
			content = nil
		case 1:
			content = []any{NewObject("type", "text", "text", g.text())}
		case 2:
			content = g.scalar()
		case 3:
			content = g.object(1)
		default:
			content = g.text()
		}
		m := msg(role, content)
		if g.chance(0.05) {
			m.Delete("content")
		}
		c.input.Messages = append(c.input.Messages, m)
	}
	if g.chance(0.05) {
		c.note = "message without role"
		c.input.Messages[g.intn(len(c.input.Messages))].Delete("role")
		c.expect = expectInvalid
	}
	return c
}

// deepseekCase builds DeepSeek V3 conversations: system prompts anywhere,
// tool-call messages with null content and string arguments, grouped tool
// outputs.
func (g *gen) deepseekCase() parityCase {
	c := parityCase{family: "deepseek_v3", bos: "<｜begin▁of▁sentence｜>", eos: "<｜end▁of▁sentence｜>"}
	c.input.AddGenerationPrompt = g.chance(0.7)
	var msgs []*Object
	if g.chance(0.6) {
		msgs = append(msgs, msg("system", g.text()))
	}
	turns := g.between(1, 4)
	for t := range turns {
		if g.chance(0.15) {
			msgs = append(msgs, msg("system", g.text()))
		}
		msgs = append(msgs, msg("user", g.text()))
		if t == turns-1 && g.chance(0.4) {
			break
		}
		if g.chance(0.5) {
			msgs = append(msgs, msg("assistant", g.text()))
			continue
		}
		calls := make([]any, g.between(1, 3))
		for i := range calls {
			calls[i] = g.toolCall(true)
		}
		content := any(nil)
		if g.chance(0.1) {
			content = "" // not none: the template drops the calls
		}
		msgs = append(msgs, msg("assistant", content).Set("tool_calls", calls))
		for range g.between(1, len(calls)) {
			msgs = append(msgs, msg("tool", g.text()))
		}
		if g.chance(0.6) {
			msgs = append(msgs, msg("assistant", g.text()))
		}
	}
	c.input.Messages = msgs

	switch g.intn(15) {
	case 0:
		c.note = "tool call arguments as an object"
		msgs = append(msgs, msg("assistant", nil).Set("tool_calls", []any{g.toolCall(false), g.toolCall(false)}))
		c.input.Messages = msgs
		c.expect = expectInvalid
	case 1:
		c.note = "user content null"
		msgs = append(msgs, msg("user", nil))
		c.input.Messages = msgs
		c.expect = expectInvalid
	}
	return c
}
