package chattemplate

// gemma3Case builds Gemma 3 conversations: an optional system prompt (a
// string or content parts) folded into the first user turn, alternating
// user and assistant ("model") turns whose content is a string or a list
// of text and image parts, and a share of inputs the template refuses
// (roles out of order, content of another type).
func (g *gen) gemma3Case() parityCase {
	c := parityCase{family: "gemma3", bos: "<bos>", eos: "<eos>"}
	c.input.AddGenerationPrompt = g.chance(0.6)
	content := func() any {
		if !g.chance(0.35) {
			return g.text()
		}
		var parts []any
		for range g.between(1, 4) {
			if g.chance(0.3) {
				parts = append(parts, NewObject("type", "image"))
			} else {
				parts = append(parts, NewObject("type", "text", "text", g.text()))
			}
		}
		return parts
	}
	if g.chance(0.5) {
		sys := any(g.text())
		if g.chance(0.3) {
			sys = []any{NewObject("type", "text", "text", g.text())}
		}
		c.input.Messages = append(c.input.Messages, msg("system", sys))
	}
	for i := range g.between(1, 6) {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c.input.Messages = append(c.input.Messages, msg(role, content()))
	}
	switch {
	case g.chance(0.06):
		c.note = "roles do not alternate"
		last, _ := c.input.Messages[len(c.input.Messages)-1].Get("role")
		role, _ := last.(string)
		if role == "system" {
			role = "assistant"
		}
		c.input.Messages = append(c.input.Messages, msg(role, g.text()))
		c.expect = expectRaise
	case g.chance(0.04):
		c.note = "content neither string nor list"
		c.input.Messages[len(c.input.Messages)-1].Set("content", pick(g, []any{nil, int64(g.between(-9, 99)), 2.5, true}))
		c.expect = expectRaise
	}
	return c
}

// gemma4Case builds Gemma 4 conversations: a system or developer prompt,
// enable_thinking on, off or undefined, tools (declared in the system
// turn), multi-turn user and assistant turns, assistant tool calls with
// object or string arguments followed by role "tool" results (matched to
// their call by id, by name, or neither), Gemma's own tool_responses on the
// assistant message, reasoning_content (rendered only after the last user
// turn with calls), thoughts left inline in the content (stripped), content
// parts with images and audio, and a share of inputs the template does not
// take.
func (g *gen) gemma4Case() parityCase {
	c := parityCase{family: "gemma4", bos: "<bos>", eos: "<eos>"}
	c.input.Extra = map[string]any{}
	g.enableThinking(c.input.Extra)
	c.input.Tools = g.toolsOrNone()
	c.input.AddGenerationPrompt = g.chance(0.7)

	var msgs []*Object
	if g.chance(0.5) {
		msgs = append(msgs, msg(pick(g, []string{"system", "system", "developer"}), g.text()))
	}
	turns := g.between(1, 4)
	for t := range turns {
		msgs = append(msgs, g.gemma4User())
		if t == turns-1 && g.chance(0.5) {
			break
		}
		turn, orphan := g.gemma4AssistantTurn()
		msgs = append(msgs, turn...)
		if orphan {
			c.note = "tool result with no name matching no call"
			c.expect = expectInvalid
		}
	}
	c.input.Messages = msgs

	switch g.intn(30) {
	case 0:
		c.note = "no messages"
		c.input.Messages = []*Object{}
		c.expect = expectInvalid
	case 1:
		c.note = "tool call without function"
		msgs = append(msgs, NewObject("role", "assistant", "content", "", "tool_calls", []any{NewObject("id", g.callID())}))
		c.input.Messages = msgs
		c.expect = expectInvalid
	}
	return c
}

// gemma4User is a user turn: text, or content parts with media.
func (g *gen) gemma4User() *Object {
	if !g.chance(0.25) {
		return msg("user", g.nonEmptyText())
	}
	var parts []any
	for range g.between(1, 4) {
		switch g.intn(5) {
		case 0:
			parts = append(parts, NewObject("type", "image"))
		case 1:
			parts = append(parts, NewObject("type", pick(g, []string{"audio", "video"})))
		default:
			parts = append(parts, NewObject("type", "text", "text", g.text()))
		}
	}
	return msg("user", parts)
}

// gemma4Thought is model text with its thought channel left in, as a
// client may send a previous answer back.
func (g *gen) gemma4Thought(answer string) string {
	return pick(g, []string{
		answer,
		"<|channel>thought\n" + g.text() + "<channel|>" + answer,
		"<|channel>thought\n<channel|>" + answer,
		answer + "<|channel>thought\n" + g.text(),
	})
}

// gemma4Assistant returns an assistant turn, possibly with tool calls and
// their results and a final answer.
func (g *gen) gemma4Assistant() []*Object {
	out, _ := g.gemma4AssistantTurn()
	return out
}

// gemma4AssistantTurn is gemma4Assistant, which also tells whether a tool
// result has neither a matching call id nor a name: the template then
// concatenates None and fails.
func (g *gen) gemma4AssistantTurn() ([]*Object, bool) {
	answer := g.gemma4Thought(g.text())
	switch g.intn(5) {
	case 0:
		return []*Object{msg("assistant", answer)}, false
	case 1:
		return []*Object{msg("assistant", []any{NewObject("type", "text", "text", answer)})}, false
	case 2:
		return []*Object{msg("assistant", answer).Set("reasoning_content", g.text())}, false
	}
	calls := make([]any, g.between(1, 3))
	for i := range calls {
		calls[i] = g.toolCall(g.chance(0.3))
	}
	content := any("")
	switch g.intn(4) {
	case 0:
		content = answer
	case 1:
		content = nil
	}
	a := msg("assistant", content).Set("tool_calls", calls)
	if g.chance(0.4) {
		a.Set(pick(g, []string{"reasoning_content", "reasoning"}), g.text())
	}
	if g.chance(0.15) { // Gemma's native form: the results on the call's message
		var responses []any
		for range calls {
			var response any = g.object(2)
			if g.chance(0.4) {
				response = g.scalar()
			}
			responses = append(responses, NewObject("name", pick(g, toolNames), "response", response))
		}
		return []*Object{a.Set("tool_responses", responses)}, false
	}
	out := []*Object{a}
	orphan := false
	for i := range calls {
		var id any = g.callID()
		matched := g.chance(0.95)
		if matched {
			id, _ = calls[i].(*Object).Get("id")
		}
		result := NewObject("role", "tool", "tool_call_id", id)
		named := g.chance(0.3)
		if named {
			result.Set("name", pick(g, toolNames))
		}
		orphan = orphan || (!matched && !named)
		if g.chance(0.25) {
			result.Set("content", []any{NewObject("type", "text", "text", g.text()), NewObject("type", "image")})
		} else {
			result.Set("content", g.text())
		}
		out = append(out, result)
	}
	if g.chance(0.6) {
		out = append(out, msg("assistant", g.gemma4Thought(g.text())))
	}
	return out, orphan
}
