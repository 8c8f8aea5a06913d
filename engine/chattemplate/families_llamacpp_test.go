package chattemplate

import "strings"

// Generators for the templates scripts/fixtures.sh takes from llama.cpp's
// models/templates (Qwen3.5, GLM-4.6, Mistral Small 3.2, Ministral 3
// Reasoning, Phi-3.5-mini).

// role is a message's role ("" when absent or not a string).
func role(m *Object) string {
	r, _ := m.Get("role")
	s, _ := r.(string)
	return s
}

// objectArgsCall is a call's arguments as an object, or rarely as JSON text,
// which templates that iterate over the arguments refuse.
func (g *gen) objectArgsCall() (*Object, bool) {
	asString := g.chance(0.05)
	return g.toolCall(asString), asString
}

// system returns a system message, its text given as one text part with
// probability parts.
func (g *gen) system(parts float64) *Object {
	var content any = g.text()
	if g.chance(parts) {
		content = []any{NewObject("type", "text", "text", g.text())}
	}
	return msg("system", content)
}

// mediaPart returns a content part for an image or a video.
func (g *gen) mediaPart(video bool) *Object {
	n := 4
	if !video {
		n = 2
	}
	switch g.intn(n) {
	case 0:
		return NewObject("type", "image")
	case 1:
		return NewObject("type", "image_url", "image_url", NewObject("url", "https://example.com/cat.png"))
	case 2:
		return NewObject("type", "video")
	default:
		return NewObject("type", "image", "image", "file:///tmp/a.png")
	}
}

// partsOrText returns text, or a list of text parts (and with media,
// images, and with video, videos).
func (g *gen) partsOrText(media, video bool) any {
	if g.chance(0.7) {
		return g.nonEmptyText()
	}
	var parts []any
	for range g.between(1, 3) {
		if media && g.chance(0.4) {
			parts = append(parts, g.mediaPart(video))
		} else {
			parts = append(parts, NewObject("type", "text", "text", g.text()))
		}
	}
	return parts
}

// qwen35Case builds Qwen3.5 conversations: its XML calls written from the
// arguments object (values printed with str() or tojson), thinking by
// default in the generation prompt, reasoning kept after the last real
// user query, image and video parts, and the template's own refusals.
func (g *gen) qwen35Case() parityCase {
	c := g.thinkingToolsCase("qwen3_5", "<|im_end|>")
	if g.chance(0.2) {
		c.input.Extra["add_vision_id"] = true
	}
	var msgs []*Object
	if g.chance(0.6) {
		msgs = append(msgs, g.system(0.2))
	}
	turns := g.between(1, 4)
	invalid := false
	for t := range turns {
		u := g.user()
		if g.chance(0.3) {
			u = msg("user", g.partsOrText(true, true))
		}
		msgs = append(msgs, u)
		if t == turns-1 && g.chance(0.5) {
			break
		}
		answer, reasoning := g.text(), g.text()
		var a *Object
		switch g.intn(6) {
		case 0:
			a = msg("assistant", answer)
		case 1:
			a = msg("assistant", g.thinkInline(reasoning, answer))
		case 2:
			a = msg("assistant", answer).Set("reasoning_content", reasoning)
		case 3:
			a = msg("assistant", g.partsOrText(false, false))
		default:
			var content any
			switch g.intn(4) {
			case 0:
				content = answer
			case 1:
				content = g.thinkInline(reasoning, answer)
			case 2:
				content = nil
			default:
				content = ""
			}
			calls := make([]any, g.between(1, 3))
			for i := range calls {
				call, str := g.objectArgsCall()
				invalid = invalid || str
				if g.chance(0.2) {
					fn, _ := call.Get("function")
					call = fn.(*Object)
				}
				calls[i] = call
			}
			a = msg("assistant", content).Set("tool_calls", calls)
			if g.chance(0.3) {
				a.Set("reasoning_content", reasoning)
			}
			msgs = append(msgs, a)
			for range calls {
				msgs = append(msgs, NewObject("role", "tool", "tool_call_id", g.callID(), "content", g.text()))
			}
			a = nil
			if g.chance(0.6) {
				a = msg("assistant", g.text())
			}
		}
		if a != nil {
			msgs = append(msgs, a)
		}
	}
	c.input.Messages = msgs
	if invalid {
		c.note = "call arguments as JSON text"
		c.expect = expectInvalid
		return c
	}
	if !hasQuery(msgs) {
		c.note = "every user message a tool response"
		c.expect = expectRaise
		return c
	}

	switch g.intn(25) {
	case 0:
		c.note = "no messages"
		c.input.Messages = []*Object{}
		c.expect = expectRaise
	case 1:
		c.note = "no user query"
		c.input.Messages = []*Object{msg("user", "<tool_response>\n"+g.text()+"\n</tool_response>")}
		c.expect = expectRaise
	case 2:
		c.note = "system message later"
		c.input.Messages = append(msgs, msg("system", g.text()))
		c.expect = expectRaise
	case 3:
		c.note = "image in the system message"
		c.input.Messages = append([]*Object{msg("system", []any{NewObject("type", "image")})}, msgs...)
		c.expect = expectRaise
	case 4:
		c.note = "unknown role"
		c.input.Messages = append(msgs, msg("critic", g.text()))
		c.expect = expectRaise
	case 5:
		c.note = "content an object"
		c.input.Messages = append(msgs, msg("user", g.object(1)))
		c.expect = expectRaise
	}
	return c
}

// glm45Case builds GLM-4.5/4.6 conversations: tools as JSON lines, calls
// as <tool_call>NAME<arg_key>…<arg_value>…, reasoning in <think>, /nothink
// when thinking is off, tool results as strings or lists.
func (g *gen) glm45Case() parityCase {
	c := g.thinkingToolsCase("glm4_5", "<|endoftext|>")

	var msgs []*Object
	if g.chance(0.5) {
		msgs = append(msgs, msg("system", g.partsOrText(false, false)))
	}
	turns := g.between(1, 4)
	invalid := false
	for t := range turns {
		if t > 0 && g.chance(0.1) {
			msgs = append(msgs, msg("system", g.text()))
		}
		u := msg("user", g.partsOrText(false, false))
		if g.chance(0.1) {
			u = msg("user", g.nonEmptyText()+"/nothink")
		}
		msgs = append(msgs, u)
		if t == turns-1 && g.chance(0.5) {
			break
		}
		answer, reasoning := g.text(), g.text()
		switch g.intn(5) {
		case 0:
			msgs = append(msgs, msg("assistant", answer))
			continue
		case 1:
			msgs = append(msgs, msg("assistant", g.thinkInline(reasoning, answer)))
			continue
		case 2:
			msgs = append(msgs, msg("assistant", answer).Set("reasoning_content", reasoning))
			continue
		}
		calls := make([]any, g.between(1, 3))
		for i := range calls {
			call, str := g.objectArgsCall()
			if g.chance(0.1) {
				fn, _ := call.Get("function")
				fn.(*Object).Set("arguments", &Object{})
				str = false
			}
			invalid = invalid || str
			calls[i] = call
		}
		a := msg("assistant", pick(g, []string{"", answer, g.thinkInline(reasoning, answer)})).Set("tool_calls", calls)
		if g.chance(0.3) {
			a.Set("reasoning_content", reasoning)
		}
		msgs = append(msgs, a)
		if g.chance(0.2) {
			results := make([]any, len(calls))
			for i := range results {
				if g.chance(0.5) {
					results[i] = NewObject("output", g.text())
				} else {
					results[i] = g.text()
				}
			}
			msgs = append(msgs, msg("tool", results))
		} else {
			for range calls {
				msgs = append(msgs, NewObject("role", "tool", "tool_call_id", g.callID(), "content", g.text()))
			}
		}
		if g.chance(0.6) {
			msgs = append(msgs, msg("assistant", g.text()))
		}
	}
	c.input.Messages = msgs
	if invalid {
		c.note = "call arguments as JSON text"
		c.expect = expectRaise
	}
	return c
}

// mistralSmallCase builds Mistral Small 3.2 conversations: the default
// system prompt with today's date, tools before the last user message,
// [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…} calls with nine-character ids,
// [TOOL_RESULTS], images, and the role-order and id refusals.
func (g *gen) mistralSmallCase() parityCase {
	c := parityCase{family: "mistral_small3", bos: "<s>", eos: "</s>"}
	c.input.Tools = g.toolsOrNone()
	c.input.AddGenerationPrompt = g.chance(0.5)
	id9 := func() string { return g.callID()[5:] + "x" } // 8 hex digits + 1
	var msgs []*Object
	if g.chance(0.5) {
		msgs = append(msgs, g.system(0.3))
	}
	turns := g.between(1, 4)
	for t := range turns {
		msgs = append(msgs, msg("user", g.partsOrText(true, false)))
		if t == turns-1 && g.chance(0.5) {
			break
		}
		if g.chance(0.5) {
			var content any = g.text()
			if g.chance(0.2) {
				content = []any{NewObject("type", "text", "text", g.text()), NewObject("type", "image")}
			}
			msgs = append(msgs, msg("assistant", content))
			continue
		}
		calls := make([]any, g.between(1, 3))
		ids := make([]string, len(calls))
		for i := range calls {
			call := g.toolCall(false)
			ids[i] = id9()
			call.Set("id", ids[i])
			calls[i] = call
		}
		msgs = append(msgs, msg("assistant", nil).Set("tool_calls", calls))
		for _, id := range ids {
			var content any = g.text()
			if g.chance(0.2) {
				content = g.object(1)
			}
			msgs = append(msgs, NewObject("role", "tool", "tool_call_id", id, "content", content))
		}
		msgs = append(msgs, msg("assistant", g.text()))
	}
	c.input.Messages = msgs

	switch g.intn(15) {
	case 0:
		c.note = "two user messages in a row"
		c.input.Messages = append(msgs, msg("user", g.text()), msg("user", g.text()))
		c.expect = expectRaise
	case 1:
		c.note = "a call id that is not nine characters"
		call := g.toolCall(false)
		c.input.Messages = append(msgs, msg("user", g.text()), msg("assistant", nil).Set("tool_calls", []any{call}))
		if last := msgs[len(msgs)-1]; role(last) == "user" {
			c.input.Messages = append(msgs, msg("assistant", nil).Set("tool_calls", []any{call}))
		}
		c.expect = expectRaise
	case 2:
		c.note = "unknown role"
		c.input.Messages = append(msgs, msg("critic", g.text()))
		c.expect = expectRaise
	}
	return c
}

// ministral3ReasoningCase builds Ministral 3 Reasoning conversations: the
// default "HOW YOU SHOULD THINK" system prompt or one of text and
// [THINK] blocks, tools, assistant turns of text and thinking blocks,
// [TOOL_CALLS]NAME[ARGS]{…} calls (arguments as an object or JSON text),
// [TOOL_RESULTS] (objects through str()), images, and the refusals.
func (g *gen) ministral3ReasoningCase() parityCase {
	c := parityCase{family: "ministral3_reasoning", bos: "<s>", eos: "</s>"}
	c.input.Tools = g.toolsOrNone()
	c.input.AddGenerationPrompt = g.chance(0.5) // the template ignores it
	blocks := func(think bool) any {
		if g.chance(0.5) {
			return g.nonEmptyText()
		}
		var parts []any
		for range g.between(1, 3) {
			if think && g.chance(0.5) {
				parts = append(parts, NewObject("type", "thinking", "thinking", g.text()))
			} else {
				parts = append(parts, NewObject("type", "text", "text", g.text()))
			}
		}
		return parts
	}
	var msgs []*Object
	if g.chance(0.5) {
		msgs = append(msgs, msg("system", blocks(true)))
	}
	turns := g.between(1, 4)
	for t := range turns {
		var user any = g.nonEmptyText()
		if g.chance(0.3) {
			user = []any{NewObject("type", "text", "text", g.text()), g.mediaPart(false)}
		}
		msgs = append(msgs, msg("user", user))
		if t == turns-1 && g.chance(0.5) {
			break
		}
		if g.chance(0.5) {
			calls := make([]any, g.between(1, 3))
			for i := range calls {
				calls[i] = g.toolCall(g.chance(0.2))
			}
			msgs = append(msgs, msg("assistant", pick(g, []any{"", blocks(true)})).Set("tool_calls", calls))
			for range calls {
				var content any = g.text()
				if g.chance(0.2) {
					content = g.object(1)
				}
				msgs = append(msgs, NewObject("role", "tool", "tool_call_id", g.callID(), "content", content))
			}
			if t == turns-1 && g.chance(0.5) {
				break
			}
		}
		msgs = append(msgs, msg("assistant", blocks(true)))
	}
	c.input.Messages = msgs

	switch g.intn(15) {
	case 0:
		c.note = "two user messages in a row"
		c.input.Messages = append(msgs, msg("user", g.text()), msg("user", g.text()))
		c.expect = expectRaise
	case 1:
		c.note = "an assistant message with neither content nor calls"
		c.input.Messages = append(msgs, msg("assistant", ""))
		c.expect = expectRaise
	case 2:
		c.note = "a thinking block from the user"
		for _, m := range msgs {
			if role(m) == "user" {
				m.Set("content", []any{NewObject("type", "thinking", "thinking", g.text())})
				break
			}
		}
		c.expect = expectRaise
	case 3:
		c.note = "unknown role"
		c.input.Messages = append(msgs, msg("critic", g.text()))
		c.expect = expectRaise
	}
	return c
}

// phi35Case builds Phi-3.5-mini conversations: <|role|> turns ended by
// <|end|>, empty system prompts dropped, eos_token without a generation
// prompt.
func (g *gen) phi35Case() parityCase {
	c := parityCase{family: "phi3_5", eos: "<|endoftext|>"}
	c.input.AddGenerationPrompt = g.chance(0.6)
	var msgs []*Object
	if g.chance(0.6) {
		msgs = append(msgs, msg("system", pick(g, []string{g.text(), ""})))
	}
	for range g.between(1, 4) {
		msgs = append(msgs, msg("user", g.text()), msg("assistant", g.text()))
	}
	if g.chance(0.5) {
		msgs = msgs[:len(msgs)-1]
	}
	c.input.Messages = msgs
	if g.chance(0.05) {
		c.note = "content null"
		msgs[len(msgs)-1].Set("content", nil)
		c.expect = expectInvalid
	}
	return c
}

// hasQuery reports whether some user message of a Qwen3.5 conversation is
// a query, not a wrapped <tool_response> (text content only).
func hasQuery(msgs []*Object) bool {
	for _, m := range msgs {
		if role(m) != "user" {
			continue
		}
		c, _ := m.Get("content")
		s, ok := c.(string)
		if !ok {
			return true
		}
		s = strings.TrimSpace(s)
		if !strings.HasPrefix(s, "<tool_response>") || !strings.HasSuffix(s, "</tool_response>") {
			return true
		}
	}
	return false
}
