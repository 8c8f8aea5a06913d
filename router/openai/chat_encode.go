package openai

import (
	"slices"
	"strings"

	"fusion/engine"
)

// meta is what every answer of one request repeats.
type meta struct {
	ID                string
	Created           int64
	Model             string
	SystemFingerprint string
}

// choiceState accumulates the events of one choice.
type choiceState struct {
	text      strings.Builder
	reasoning strings.Builder
	calls     []engine.ToolCall
	mcp       []MCPCall
	tokens    []engine.TokenLogprob
	top       [][]engine.TokenLogprob
	finish    engine.FinishReason
	usage     engine.Usage
	done      bool
}

func (c *choiceState) add(ev engine.Event) {
	c.text.WriteString(ev.Text)
	c.reasoning.WriteString(ev.Reasoning)
	c.calls = append(c.calls, ev.ToolCalls...)
	if st := ev.ServerTool; st != nil {
		if i := slices.IndexFunc(c.mcp, func(m MCPCall) bool { return m.ID == st.ID }); i >= 0 {
			c.mcp[i] = mcpCall(st)
		} else {
			c.mcp = append(c.mcp, mcpCall(st))
		}
	}
	c.tokens = append(c.tokens, ev.Tokens...)
	c.top = append(c.top, padTop(ev)...)
	if ev.Done {
		c.done, c.finish, c.usage = true, ev.FinishReason, ev.Usage
	}
}

// padTop returns ev.TopLogprobs with one entry per token of ev.Tokens.
func padTop(ev engine.Event) [][]engine.TokenLogprob {
	top := ev.TopLogprobs
	for len(top) < len(ev.Tokens) {
		top = append(top, nil)
	}
	return top[:len(ev.Tokens)]
}

// chatLogprobs is the chat API's logprobs of some tokens.
func chatLogprobs(tokens []engine.TokenLogprob, top [][]engine.TokenLogprob) *ChatLogprobs {
	out := &ChatLogprobs{Content: make([]TokenLogprob, len(tokens)), Refusal: nil}
	for i, t := range tokens {
		alts := []TopLogprob{}
		if i < len(top) {
			for _, a := range top[i] {
				alts = append(alts, TopLogprob{Token: a.Text, Logprob: logprob(a.Logprob), Bytes: tokenBytes(a.Text)})
			}
		}
		out.Content[i] = TokenLogprob{Token: t.Text, Logprob: logprob(t.Logprob), Bytes: tokenBytes(t.Text), TopLogprobs: alts}
	}
	return out
}

// chatCollector builds a non-streamed chat completion from the events of
// its choices.
type chatCollector struct {
	meta     meta
	logprobs bool
	promptOf []int
	choices  []choiceState
}

func newChatCollector(m meta, p *plan) *chatCollector {
	return &chatCollector{meta: m, logprobs: p.logprobs, promptOf: p.promptOf, choices: make([]choiceState, len(p.reqs))}
}

func (c *chatCollector) add(i int, ev engine.Event) { c.choices[i].add(ev) }

func (c *chatCollector) result() ChatCompletion {
	out := ChatCompletion{
		ID: c.meta.ID, Object: "chat.completion", Created: c.meta.Created, Model: c.meta.Model,
		SystemFingerprint: c.meta.SystemFingerprint, Choices: make([]ChatChoice, len(c.choices)),
	}
	per := make([]engine.Usage, len(c.choices))
	for i := range c.choices {
		ch := &c.choices[i]
		out.Choices[i] = ChatChoice{
			Index:        i,
			Message:      ch.message(),
			FinishReason: FinishReason(ch.finish),
		}
		if c.logprobs {
			out.Choices[i].Logprobs = chatLogprobs(ch.tokens, ch.top)
		}
		per[i] = ch.usage
	}
	out.Usage = usage(per, c.promptOf)
	return out
}

// message is the assistant's message of a finished choice: content null
// when the model only called tools, the reasoning under both names.
func (c *choiceState) message() ChatMessage {
	m := ChatMessage{Role: "assistant", MCPCalls: c.mcp}
	if text := c.text.String(); text != "" || len(c.calls) == 0 {
		m.Content = &text
	}
	if r := c.reasoning.String(); r != "" {
		m.ReasoningContent, m.Reasoning = &r, &r
	}
	for _, tc := range c.calls {
		m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Type: "function",
			Function: FunctionCall{Name: tc.Name, Arguments: toolArguments(tc)}})
	}
	return m
}

// toolArguments is a call's arguments, "{}" when the engine gave none.
func toolArguments(tc engine.ToolCall) string {
	if tc.Arguments == "" {
		return "{}"
	}
	return tc.Arguments
}

// chatStream turns the events of a streamed chat completion into chunks,
// in OpenAI's order: a role chunk per choice, reasoning, content and
// tool-call chunks as they come (per event: reasoning, then content, then
// each call as a header chunk and an arguments chunk), a finish
// chunk per choice (delta {}), then — with include_usage — one chunk with
// no choices and the usage. Without include_usage the last finish chunk
// carries the usage, as the contract shows.
type chatStream struct {
	meta         meta
	logprobs     bool
	includeUsage bool
	promptOf     []int
	usages       []engine.Usage
	open         int // choices not finished yet
}

func newChatStream(m meta, p *plan) *chatStream {
	return &chatStream{meta: m, logprobs: p.logprobs, includeUsage: p.includeUsage, promptOf: p.promptOf,
		usages: make([]engine.Usage, len(p.reqs)), open: len(p.reqs)}
}

func (s *chatStream) chunk(choices ...ChatChunkChoice) ChatChunk {
	c := ChatChunk{ID: s.meta.ID, Object: "chat.completion.chunk", Created: s.meta.Created, Model: s.meta.Model,
		SystemFingerprint: s.meta.SystemFingerprint, Choices: choices}
	if s.includeUsage {
		c.Usage = OptionalUsage{Set: true}
	}
	return c
}

// start returns the role chunks, one per choice.
func (s *chatStream) start() []ChatChunk {
	out := make([]ChatChunk, len(s.usages))
	empty := ""
	for i := range out {
		out[i] = s.chunk(ChatChunkChoice{Index: i, Delta: ChatDelta{Role: "assistant", Content: &empty}})
	}
	return out
}

// event returns the chunks for one event of choice i.
func (s *chatStream) event(i int, ev engine.Event) []ChatChunk {
	var deltas []ChatDelta
	if ev.Reasoning != "" {
		r := ev.Reasoning
		deltas = append(deltas, ChatDelta{ReasoningContent: &r, Reasoning: &r})
	}
	if ev.Text != "" || (len(deltas) == 0 && len(ev.ToolCalls) == 0 && s.logprobs && len(ev.Tokens) > 0) {
		text := ev.Text
		deltas = append(deltas, ChatDelta{Content: &text})
	}
	if ev.ServerTool != nil {
		call := mcpCall(ev.ServerTool)
		deltas = append(deltas, ChatDelta{MCPCall: &call})
	}
	for _, tc := range ev.ToolCalls {
		deltas = append(deltas,
			ChatDelta{ToolCalls: []ToolCallDelta{{Index: tc.Index, ID: tc.ID, Type: "function",
				Function: FunctionCallDelta{Name: tc.Name, Arguments: ""}}}},
			ChatDelta{ToolCalls: []ToolCallDelta{{Index: tc.Index, Function: FunctionCallDelta{Arguments: toolArguments(tc)}}}})
	}
	out := make([]ChatChunk, 0, len(deltas)+1)
	for k, d := range deltas {
		ch := ChatChunkChoice{Index: i, Delta: d}
		if s.logprobs && k == 0 { // the event's tokens go with its first chunk
			ch.Logprobs = chatLogprobs(ev.Tokens, padTop(ev))
		}
		out = append(out, s.chunk(ch))
	}
	if ev.Done {
		s.usages[i] = ev.Usage
		s.open--
		reason := FinishReason(ev.FinishReason)
		fin := s.chunk(ChatChunkChoice{Index: i, FinishReason: &reason})
		if s.open == 0 && !s.includeUsage {
			u := usage(s.usages, s.promptOf)
			fin.Usage = OptionalUsage{Set: true, Usage: &u}
		}
		out = append(out, fin)
	}
	return out
}

// end returns the usage chunk, if asked for.
func (s *chatStream) end() []ChatChunk {
	if !s.includeUsage {
		return nil
	}
	u := usage(s.usages, s.promptOf)
	c := s.chunk()
	c.Choices = []ChatChunkChoice{}
	c.Usage = OptionalUsage{Set: true, Usage: &u}
	return []ChatChunk{c}
}
