package anthropic

import (
	"encoding/json"
	"net/http"
	"strings"

	"fusion/engine"
	"fusion/router/wire"
)

// event is one server-sent event: its name and its data, whose "type"
// equals the name.
type event struct {
	name string
	data any
}

// output is one step of parsed model output: content text, reasoning, and
// tool-call deltas (the first delta of a call carries ID and Name, later
// ones argument fragments). It mirrors the output parsers' shape; outputOf
// builds it from an engine event.
type output struct {
	Content   string
	Reasoning string
	Calls     []callDelta
}

type callDelta struct {
	Index            int // the call's index among this message's calls
	ID, Name         string
	ArgumentFragment string
}

// blockKind is the kind of the open content block.
type blockKind int

const (
	noBlock blockKind = iota
	textBlock
	thinkingBlock
	toolBlock
	serverBlock // mcp_tool_use, mcp_tool_result: whole at their start
)

// blocks is the state machine shared by the streamed and the non-streamed
// answer: it opens, feeds and closes content blocks in order (a delta of
// another kind than the open block closes it and opens the next), and
// records the blocks for the final message.
type blocks struct {
	open    blockKind
	call    int // the call index of the open tool block
	content []any
	args    []strings.Builder // per tool block in content, its input JSON
	argOf   []int             // per content index, its args index (-1: not a tool block)
	calls   int               // tool_use blocks opened
	sig     thinkingSigner
	thought strings.Builder // the open thinking block's text (its only copy when omitted)
}

// thinkingSigner signs the thinking blocks of one answer.
type thinkingSigner struct {
	codec *thinkingCodec
	model string
	omit  bool // display "omitted": blocks show no thinking, their signature seals it
}

// signature is the signature of a thinking block with this text.
func (s thinkingSigner) signature(thinking string) string {
	if s.omit {
		return s.codec.seal(s.model, thinking)
	}
	return s.codec.sign(s.model, thinking)
}

// index is the open block's position.
func (b *blocks) index() int { return len(b.content) - 1 }

func (b *blocks) close() []event {
	if b.open == noBlock {
		return nil
	}
	var out []event
	i := b.index()
	if b.open == thinkingBlock {
		// The signature covers the whole text, so it comes last, just
		// before the block stops (as Anthropic sends it).
		tb := b.content[i].(ThinkingBlock)
		tb.Signature = b.sig.signature(b.thought.String())
		b.content[i] = tb
		b.thought.Reset()
		out = append(out, event{"content_block_delta", ContentBlockDelta{Type: "content_block_delta", Index: i,
			Delta: SignatureDelta{Type: "signature_delta", Signature: tb.Signature}}})
	}
	if b.open == toolBlock {
		in := strings.TrimSpace(b.args[b.argOf[i]].String())
		if in == "" || !json.Valid([]byte(in)) {
			in = "{}"
		}
		tb := b.content[i].(ToolUseBlock)
		tb.Input = json.RawMessage(in)
		b.content[i] = tb
	}
	b.open = noBlock
	return append(out, event{"content_block_stop", ContentBlockStop{Type: "content_block_stop", Index: i}})
}

func (b *blocks) start(kind blockKind, block any) []event {
	out := b.close()
	b.open = kind
	b.content = append(b.content, block)
	arg := -1
	if kind == toolBlock {
		arg = len(b.args)
		b.args = append(b.args, strings.Builder{})
		b.calls++
	}
	b.argOf = append(b.argOf, arg)
	return append(out, event{"content_block_start", ContentBlockStart{Type: "content_block_start", Index: b.index(), ContentBlock: startOf(block)}})
}

// startOf is a block as content_block_start shows it: empty.
func startOf(block any) any {
	switch v := block.(type) {
	case TextBlock:
		return TextBlock{Type: "text", Text: ""}
	case ThinkingBlock:
		return ThinkingBlock{Type: "thinking", Thinking: "", Signature: ""}
	case ToolUseBlock:
		return ToolUseBlock{Type: "tool_use", ID: v.ID, Name: v.Name, Input: json.RawMessage("{}")}
	}
	return block
}

func (b *blocks) delta(d any) event {
	return event{"content_block_delta", ContentBlockDelta{Type: "content_block_delta", Index: b.index(), Delta: d}}
}

// add feeds one step of output.
func (b *blocks) add(o output) []event {
	var out []event
	if o.Reasoning != "" {
		if b.open != thinkingBlock {
			out = append(out, b.start(thinkingBlock, ThinkingBlock{Type: "thinking"})...)
		}
		b.thought.WriteString(o.Reasoning)
		if !b.sig.omit { // omitted: no thinking_delta, the block stays empty
			tb := b.content[b.index()].(ThinkingBlock)
			tb.Thinking += o.Reasoning
			b.content[b.index()] = tb
			out = append(out, b.delta(ThinkingDelta{Type: "thinking_delta", Thinking: o.Reasoning}))
		}
	}
	if o.Content != "" {
		if b.open != textBlock {
			out = append(out, b.start(textBlock, TextBlock{Type: "text"})...)
		}
		tb := b.content[b.index()].(TextBlock)
		tb.Text += o.Content
		b.content[b.index()] = tb
		out = append(out, b.delta(TextDelta{Type: "text_delta", Text: o.Content}))
	}
	for _, c := range o.Calls {
		if c.ID != "" || c.Name != "" { // a call's header opens its block
			id := c.ID
			if !strings.HasPrefix(id, "toolu_") {
				id = "toolu_" + strings.TrimPrefix(id, "call_")
			}
			out = append(out, b.start(toolBlock, ToolUseBlock{Type: "tool_use", ID: id, Name: c.Name})...)
			b.call = c.Index
		}
		if c.ArgumentFragment != "" && b.open == toolBlock && b.call == c.Index {
			b.args[b.argOf[b.index()]].WriteString(c.ArgumentFragment)
			out = append(out, b.delta(InputJSONDelta{Type: "input_json_delta", PartialJSON: c.ArgumentFragment}))
		}
	}
	return out
}

// serverTool shows a step of a server-run call as a block of its own,
// whole in its content_block_start.
func (b *blocks) serverTool(st *engine.ServerToolStep) []event {
	return append(b.start(serverBlock, mcpBlock(st)), b.close()...)
}

// finish closes the last block; a message with no block gets an empty
// text block, so the content is never empty.
func (b *blocks) finish() []event {
	if len(b.content) == 0 {
		return append(b.start(textBlock, TextBlock{Type: "text"}), b.close()...)
	}
	return b.close()
}

// streamConverter turns the engine events of one generation into
// Anthropic's stream events: message_start, the content blocks (a ping
// after the first content_block_start), message_delta, message_stop.
type streamConverter struct {
	id, model   string
	inputTokens int // the prompt's tokens, known before generation
	blocks      blocks
	pinged      bool
}

func newStreamConverter(id, model string, inputTokens int, sig thinkingSigner) *streamConverter {
	return &streamConverter{id: id, model: model, inputTokens: inputTokens, blocks: blocks{sig: sig}}
}

// start returns the events sent before the first token's; first is the
// engine's first event, whose usage (when set) splits the prompt into
// uncached, cache-read and cache-written tokens as the API's
// message_start does.
func (c *streamConverter) start(first engine.Event) []event {
	u := Usage{InputTokens: c.inputTokens, OutputTokens: 1}
	if first.Usage.PromptTokens > 0 {
		u = usage(first.Usage)
		u.OutputTokens = 1
	}
	msg := Message{ID: c.id, Type: "message", Role: "assistant", Model: c.model, Content: []any{}, Usage: u}
	return []event{{"message_start", MessageStart{Type: "message_start", Message: msg}}}
}

// ping follows the first content_block_start.
func (c *streamConverter) ping(evs []event) []event {
	if c.pinged {
		return evs
	}
	for i, e := range evs {
		if e.name == "content_block_start" {
			c.pinged = true
			return append(evs[:i+1], append([]event{{"ping", Ping{Type: "ping"}}}, evs[i+1:]...)...)
		}
	}
	return evs
}

// event returns the events of one engine event (not an error).
func (c *streamConverter) event(ev engine.Event) []event {
	if ev.ServerTool != nil {
		return c.ping(c.blocks.serverTool(ev.ServerTool))
	}
	return c.output(outputOf(ev), ev)
}

// outputOf is the parsed output an engine event carries: reasoning, then
// content, then each complete tool call as a header delta followed by one
// fragment holding all its arguments.
func outputOf(ev engine.Event) output {
	o := output{Content: ev.Text, Reasoning: ev.Reasoning}
	for _, tc := range ev.ToolCalls {
		args := tc.Arguments
		if args == "" {
			args = "{}"
		}
		o.Calls = append(o.Calls,
			callDelta{Index: tc.Index, ID: tc.ID, Name: tc.Name},
			callDelta{Index: tc.Index, ArgumentFragment: args})
	}
	return o
}

// output returns the events of one step of parsed output and, when ev is
// the final event, the closing events.
func (c *streamConverter) output(o output, ev engine.Event) []event {
	out := c.blocks.add(o)
	if ev.Done {
		out = append(out, c.blocks.finish()...)
		reason, seq := stopReason(ev, c.blocks.calls > 0)
		out = append(out,
			event{"message_delta", MessageDelta{Type: "message_delta", Delta: MessageDeltaBody{StopReason: &reason, StopSequence: seq},
				Usage: usage(ev.Usage)}},
			event{"message_stop", MessageStop{Type: "message_stop"}})
	}
	return c.ping(out)
}

// accumulator builds the non-streamed answer.
type accumulator struct {
	msg    Message
	blocks blocks
}

func newAccumulator(id, model string, sig thinkingSigner) *accumulator {
	return &accumulator{msg: Message{ID: id, Type: "message", Role: "assistant", Model: model}, blocks: blocks{sig: sig}}
}

func (a *accumulator) add(ev engine.Event) {
	if ev.ServerTool != nil {
		a.blocks.serverTool(ev.ServerTool)
		return
	}
	a.output(outputOf(ev), ev)
}

func (a *accumulator) output(o output, ev engine.Event) {
	a.blocks.add(o)
	if ev.Done {
		a.blocks.finish()
		reason, seq := stopReason(ev, a.blocks.calls > 0)
		a.msg.StopReason, a.msg.StopSequence = &reason, seq
		a.msg.Usage = usage(ev.Usage)
	}
}

func (a *accumulator) result() Message {
	m := a.msg
	m.Content = a.blocks.content
	if m.Content == nil {
		m.Content = []any{}
	}
	return m
}

// sseWriter writes named server-sent events, flushing each.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) write(e event) error {
	b, err := wire.Marshal(e.data)
	if err != nil {
		return err
	}
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
	}
	buf := make([]byte, 0, len(b)+len(e.name)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, e.name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, '\n', '\n')
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// fail writes an error event, as Anthropic does when a stream breaks.
func (s *sseWriter) fail(e *Error) error { return s.write(event{"error", e.body()}) }
