package anthropic

import (
	"encoding/json"
	"fmt"
	"fusion/router/jsonkind"
	"slices"
	"strings"
	"unicode"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/sample"
	"fusion/router/mcpchat"
)

// Options are the settings of the Anthropic dialect.
type Options struct {
	// MaxTokens caps max_tokens: a larger request is clamped to it (Claude
	// clients send their model's output limit, often far above a local
	// node's). 0: no cap here; the model's context window bounds the
	// answer (stop_reason model_context_window_exceeded when it does).
	MaxTokens int
}

// Limits of request fields.
const (
	maxStops          = 64   // stop_sequences
	minThinkingBudget = 1024 // thinking.budget_tokens, as Anthropic
)

// plan is a checked request: the engine request and how to answer.
type plan struct {
	req    *engine.Request
	stream bool
	// omitThinking: thinking.display "omitted" — thinking blocks are
	// answered empty, their signature sealing the text.
	omitThinking bool
	mcp          *mcpchat.Toolset // the MCP tools the server runs (nil: none)
	// formatParam is the field that asked for structured output
	// (output_config.format or output_format; "": none).
	formatParam string
}

// toPlan checks a messages request and converts it into an engine request;
// codec checks the thinking blocks of the history.
func (req *MessagesRequest) toPlan(opts Options, id string, codec *thinkingCodec, mc *mcpchat.Runner) (*plan, *Error) {
	if req.Model == "" {
		return nil, missing("model")
	}
	if req.MaxTokens == nil {
		return nil, missing("max_tokens")
	}
	if *req.MaxTokens < 1 {
		return nil, invalid("max_tokens: Input should be greater than or equal to 1")
	}
	base, mcpTools, err := req.prompt(id, codec, mc)
	if err != nil {
		return nil, err
	}
	base.MaxTokens = *req.MaxTokens
	if opts.MaxTokens > 0 && base.MaxTokens > opts.MaxTokens {
		base.MaxTokens = opts.MaxTokens
	}
	// budget_tokens bounds the reasoning: the runner closes the model's
	// <think> block once it is spent.
	if base.EnableThinking, base.ReasoningBudget, err = parseThinking(req.Thinking, *req.MaxTokens); err != nil {
		return nil, err
	}
	if base.Stop, err = parseStopSequences(req.StopSequences); err != nil {
		return nil, err
	}
	if base.Sampling, err = req.samplingParams(); err != nil {
		return nil, err
	}
	if err := checkMetadata(req.Metadata); err != nil {
		return nil, err
	}
	var formatParam string
	if base.ResponseFormat, formatParam, err = parseOutputFormat(req.OutputConfig, req.OutputFormat); err != nil {
		return nil, err
	}
	if base.ResponseFormat != nil && base.ContinueFinal {
		// As the Messages API: JSON outputs cannot continue a prefill.
		return nil, invalid("%s: structured output is incompatible with a prefilled final assistant message; send the request without it.", formatParam)
	}
	if err := checkObject(req.ContextManagement, "context_management"); err != nil {
		return nil, err
	}
	if base.Priority, err = parseTaskTag(req.TaskTag); err != nil {
		return nil, err
	}
	if err := applyBackend(req.BackendOverride, base); err != nil {
		return nil, err
	}
	omit, err := parseThinkingDisplay(req.Thinking)
	if err != nil {
		return nil, err
	}
	return &plan{req: base, stream: req.Stream != nil && *req.Stream, omitThinking: omit, mcp: mcpTools, formatParam: formatParam}, nil
}

// prompt converts what decides the prompt (system, messages, tools,
// tool_choice, thinking, the MCP tools asked for): all of count_tokens'
// input. codec checks the history's thinking blocks and opens the sealed
// ones; mc resolves the MCP servers.
func (req *MessagesRequest) prompt(id string, codec *thinkingCodec, mc *mcpchat.Runner) (*engine.Request, *mcpchat.Toolset, *Error) {
	r, err := req.promptRequest(id, codec)
	if err != nil {
		return nil, nil, err
	}
	refs, err := parseMCPServers(req.MCPServers)
	if err != nil {
		return nil, nil, err
	}
	tools, mcpTools, err := resolveMCP(mc, append(r.mcpRefs, refs...), r.Tools)
	if err != nil {
		return nil, nil, err
	}
	r.Tools = tools
	if r.ToolChoice, err = parseToolChoice(req.ToolChoice, r.Tools); err != nil {
		return nil, nil, err
	}
	if r.ToolChoice.Mode == engine.ToolNone {
		r.Tools, mcpTools = nil, nil // the model is not offered the tools
	}
	return r.Request, mcpTools, nil
}

// promptRequest is a request's prompt before its MCP servers are
// resolved, and tool_choice checked against the tools.
type promptRequest struct {
	*engine.Request
	mcpRefs []mcpchat.Ref
}

func (req *MessagesRequest) promptRequest(id string, codec *thinkingCodec) (*promptRequest, *Error) {
	if req.Model == "" {
		return nil, missing("model")
	}
	if isNull(req.Messages) {
		return nil, missing("messages")
	}
	var msgs []*chattemplate.Object
	system, err := parseSystem(req.System)
	if err != nil {
		return nil, err
	}
	if system != nil {
		msgs = append(msgs, chattemplate.NewObject("role", "system", "content", *system))
	}
	conv, err := parseMessages(req.Messages, codec)
	if err != nil {
		return nil, err
	}
	msgs = append(msgs, conv...)
	msgs, continueFinal, err := prefill(msgs)
	if err != nil {
		return nil, err
	}
	tools, refs, err := parseTools(req.Tools)
	if err != nil {
		return nil, err
	}
	r := &engine.Request{ID: id, Model: req.Model, Messages: msgs, Tools: tools, ContinueFinal: continueFinal}
	var budget int
	if r.EnableThinking, budget, err = parseThinking(req.Thinking, 0); err != nil {
		return nil, err
	}
	// thinking: enabled promises an answer that starts with a thinking
	// block: a hybrid model's generation prompt opens it (adaptive leaves
	// the choice to the model).
	r.StartThinking = budget > 0
	return &promptRequest{Request: r, mcpRefs: refs}, nil
}

// parseSystem reads system: a string or a list of text blocks.
func parseSystem(raw json.RawMessage) (*string, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	v, err := decodeRaw(raw, "system", "a valid string or a list of text blocks")
	if err != nil {
		return nil, err
	}
	s, err := systemText(v, "system")
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// systemText reads a system prompt, the request's or a system entry's
// content: a string or a list of text blocks (joined with "\n").
func systemText(v any, param string) (string, *Error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []any:
		texts := make([]string, 0, len(s))
		for i, item := range s {
			bp := at(param, i)
			b, ok := item.(*chattemplate.Object)
			if !ok {
				return "", invalidType(bp, "a valid dictionary", jsonkind.OfValue(item))
			}
			typ, err := stringField(b, "type", bp)
			if err != nil {
				return "", err
			}
			if typ != "text" {
				return "", invalid("%s.type: Input should be 'text'", bp)
			}
			text, err := stringField(b, "text", bp)
			if err != nil {
				return "", err
			}
			texts = append(texts, text)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", invalidType(param, "a valid string or a list of text blocks", jsonkind.OfValue(v))
}

// systemMessage converts a system entry of messages (as current Claude
// Code sends, between the turns) into a system message where it stands;
// the chat template decides how it renders (see doc.go).
func systemMessage(m *chattemplate.Object, param string) ([]*chattemplate.Object, *Error) {
	cv, ok := field(m, "content")
	if !ok {
		return nil, missing(param + ".content")
	}
	text, err := systemText(cv, param+".content")
	if err != nil {
		return nil, err
	}
	return []*chattemplate.Object{chattemplate.NewObject("role", "system", "content", text)}, nil
}

// parseMessages converts Anthropic messages into the OpenAI-style messages
// chat templates expect: system entries stay system messages in order,
// tool_use blocks become the assistant's tool_calls (arguments as
// objects), tool_result blocks become "tool" messages,
// thinking and redacted_thinking blocks, once their signature is checked,
// become the assistant's reasoning_content.
func parseMessages(raw json.RawMessage, codec *thinkingCodec) ([]*chattemplate.Object, *Error) {
	v, err := decodeRaw(raw, "messages", "a valid list")
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, invalidType("messages", "a valid list", jsonkind.OfValue(v))
	}
	if len(list) == 0 {
		return nil, invalid("messages: at least one message is required")
	}
	var out []*chattemplate.Object
	for i, item := range list {
		param := at("messages", i)
		m, ok := item.(*chattemplate.Object)
		if !ok {
			return nil, invalidType(param, "a valid dictionary", jsonkind.OfValue(item))
		}
		role, err := stringField(m, "role", param)
		if err != nil {
			return nil, err
		}
		var conv []*chattemplate.Object
		switch role {
		case "user":
			conv, err = userMessage(m, param)
		case "assistant":
			conv, err = assistantMessage(m, param, codec)
		case "system":
			conv, err = systemMessage(m, param)
		default:
			return nil, invalid("%s.role: Input should be 'user', 'assistant' or 'system'", param)
		}
		if err != nil {
			return nil, err
		}
		for _, c := range conv {
			if n := len(out); n > 0 && mergeable(out[n-1], c) {
				mergeInto(out[n-1], c)
				continue
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// mergeable reports whether b continues a's turn: consecutive user or
// assistant messages are one turn, as the Messages API takes them.
func mergeable(a, b *chattemplate.Object) bool {
	ra, _ := a.Get("role")
	rb, _ := b.Get("role")
	return ra == rb && (ra == "user" || ra == "assistant")
}

// mergeInto appends b's content (texts joined with "\n"), reasoning and
// tool calls to a.
func mergeInto(a, b *chattemplate.Object) {
	for _, k := range []string{"content", "reasoning_content"} {
		bv, ok := b.Get(k)
		if !ok || bv == "" {
			continue
		}
		if av, ok := a.Get(k); ok && av != "" {
			a.Set(k, av.(string)+"\n"+bv.(string))
		} else {
			a.Set(k, bv)
		}
	}
	if bv, ok := b.Get("tool_calls"); ok {
		av, _ := a.Get("tool_calls")
		calls, _ := av.([]any)
		a.Set("tool_calls", append(calls, bv.([]any)...))
	}
}

// prefill checks a final assistant message, which the model continues:
// its text must not end in whitespace (as the Messages API requires) and
// it may not hold tool_use blocks. An empty one is dropped.
func prefill(msgs []*chattemplate.Object) ([]*chattemplate.Object, bool, *Error) {
	last := msgs[len(msgs)-1]
	if role, _ := last.Get("role"); role != "assistant" {
		return msgs, false, nil
	}
	if _, ok := last.Get("tool_calls"); ok {
		return nil, false, invalid("messages: the final assistant message has tool_use blocks without a following tool_result.")
	}
	cv, _ := last.Get("content")
	content, _ := cv.(string)
	if content == "" {
		return msgs[:len(msgs)-1], false, nil
	}
	if strings.TrimRightFunc(content, unicode.IsSpace) != content {
		return nil, false, invalid("messages: final assistant content cannot end with trailing whitespace")
	}
	return msgs, true, nil
}

// contentBlocks returns a message's content as blocks: a string is one text
// block.
func contentBlocks(m *chattemplate.Object, param string) ([]*chattemplate.Object, *Error) {
	cv, ok := field(m, "content")
	if !ok {
		return nil, missing(param + ".content")
	}
	switch c := cv.(type) {
	case string:
		return []*chattemplate.Object{chattemplate.NewObject("type", "text", "text", c)}, nil
	case []any:
		out := make([]*chattemplate.Object, len(c))
		for j, item := range c {
			b, ok := item.(*chattemplate.Object)
			if !ok {
				return nil, invalidType(at(param+".content", j), "a valid dictionary", jsonkind.OfValue(item))
			}
			if _, err := stringField(b, "type", at(param+".content", j)); err != nil {
				return nil, err
			}
			out[j] = b
		}
		return out, nil
	}
	return nil, invalidType(param+".content", "a valid string or a list of content blocks", jsonkind.OfValue(cv))
}

// unsupportedBlock is the 400 of a block type our models cannot take.
func unsupportedBlock(param, typ string) *Error {
	switch typ {
	case "image", "document":
		return invalid("%s: content blocks of type '%s' are not supported: the models this server runs take text only.", param, typ)
	}
	return invalid("%s.type: content blocks of type '%s' are not supported by this server.", param, typ)
}

// userMessage converts a user message: text blocks into user messages,
// each tool_result into a "tool" message, in order.
func userMessage(m *chattemplate.Object, param string) ([]*chattemplate.Object, *Error) {
	bs, err := contentBlocks(m, param)
	if err != nil {
		return nil, err
	}
	var out []*chattemplate.Object
	var texts []string
	flush := func() {
		if len(texts) > 0 {
			out = append(out, chattemplate.NewObject("role", "user", "content", strings.Join(texts, "\n")))
			texts = nil
		}
	}
	for j, b := range bs {
		bp := at(param+".content", j)
		typ, _ := b.Get("type")
		switch typ {
		case "text":
			s, err := stringField(b, "text", bp)
			if err != nil {
				return nil, err
			}
			texts = append(texts, s)
		case "tool_result":
			flush()
			msg, err := toolResult(b, bp)
			if err != nil {
				return nil, err
			}
			out = append(out, msg)
		default:
			return nil, unsupportedBlock(bp, typ.(string))
		}
	}
	flush()
	if len(out) == 0 { // an empty content list
		out = append(out, chattemplate.NewObject("role", "user", "content", ""))
	}
	return out, nil
}

// toolResult converts a tool_result block into a "tool" message. A result
// with is_error is prefixed "Error: ", since templates have no such flag.
func toolResult(b *chattemplate.Object, param string) (*chattemplate.Object, *Error) {
	id, err := stringField(b, "tool_use_id", param)
	if err != nil {
		return nil, err
	}
	content := ""
	if cv, ok := field(b, "content"); ok {
		switch c := cv.(type) {
		case string:
			content = c
		case []any:
			var texts []string
			for k, item := range c {
				ip := at(param+".content", k)
				ib, ok := item.(*chattemplate.Object)
				if !ok {
					return nil, invalidType(ip, "a valid dictionary", jsonkind.OfValue(item))
				}
				typ, err := stringField(ib, "type", ip)
				if err != nil {
					return nil, err
				}
				if typ != "text" {
					return nil, unsupportedBlock(ip, typ)
				}
				s, err := stringField(ib, "text", ip)
				if err != nil {
					return nil, err
				}
				texts = append(texts, s)
			}
			content = strings.Join(texts, "\n")
		default:
			return nil, invalidType(param+".content", "a valid string or a list of content blocks", jsonkind.OfValue(cv))
		}
	}
	if ev, ok := field(b, "is_error"); ok {
		isErr, ok := ev.(bool)
		if !ok {
			return nil, invalidType(param+".is_error", "a valid boolean", jsonkind.OfValue(ev))
		}
		if isErr {
			content = "Error: " + content
		}
	}
	return chattemplate.NewObject("role", "tool", "tool_call_id", id, "content", content), nil
}

// assistantMessage converts an assistant message into one message with
// content, tool_calls and reasoning_content.
func assistantMessage(m *chattemplate.Object, param string, codec *thinkingCodec) ([]*chattemplate.Object, *Error) {
	bs, err := contentBlocks(m, param)
	if err != nil {
		return nil, err
	}
	var out []*chattemplate.Object
	var texts, thinking []string
	var calls []any
	// flush ends the assistant message so far; an mcp_tool_result (the
	// server ran the call inside the turn) follows it as a tool message.
	flush := func() {
		msg := chattemplate.NewObject("role", "assistant", "content", strings.Join(texts, "\n"))
		if len(thinking) > 0 {
			msg.Set("reasoning_content", strings.Join(thinking, "\n"))
		}
		if len(calls) > 0 {
			msg.Set("tool_calls", calls)
		}
		out = append(out, msg)
		texts, thinking, calls = nil, nil, nil
	}
	for j, b := range bs {
		bp := at(param+".content", j)
		typ, _ := b.Get("type")
		switch typ {
		case "text":
			s, err := stringField(b, "text", bp)
			if err != nil {
				return nil, err
			}
			texts = append(texts, s)
		case "thinking", "redacted_thinking":
			s, err := reasoningOf(b, bp, typ.(string), codec)
			if err != nil {
				return nil, err
			}
			if s != "" {
				thinking = append(thinking, s)
			}
		case "tool_use", "mcp_tool_use":
			id, err := stringField(b, "id", bp)
			if err != nil {
				return nil, err
			}
			name, err := stringField(b, "name", bp)
			if err != nil {
				return nil, err
			}
			iv, ok := field(b, "input")
			if !ok {
				return nil, missing(bp + ".input")
			}
			input, ok := iv.(*chattemplate.Object)
			if !ok {
				return nil, invalidType(bp+".input", "a valid dictionary", jsonkind.OfValue(iv))
			}
			calls = append(calls, chattemplate.NewObject("id", id, "type", "function",
				"function", chattemplate.NewObject("name", name, "arguments", input)))
		case "mcp_tool_result":
			id, err := stringField(b, "tool_use_id", bp)
			if err != nil {
				return nil, err
			}
			text, err := mcpResultText(b, bp)
			if err != nil {
				return nil, err
			}
			flush()
			out = append(out, chattemplate.NewObject("role", "tool", "tool_call_id", id, "content", text))
		default:
			return nil, unsupportedBlock(bp, typ.(string))
		}
	}
	if len(out) == 0 || len(texts) > 0 || len(thinking) > 0 || len(calls) > 0 {
		flush()
	}
	return out, nil
}

// reasoningOf checks the signature of a thinking block (or the data of a
// redacted_thinking block) of the history and returns the reasoning it
// stands for: the block's text, or the text its signature seals. A block
// without a signature this cluster made for that text is a 400, as the
// Messages API answers an edited or foreign block.
func reasoningOf(b *chattemplate.Object, param, typ string, codec *thinkingCodec) (string, *Error) {
	var text, sig string
	var err *Error
	if typ == "thinking" {
		if text, err = stringField(b, "thinking", param); err != nil {
			return "", err
		}
		if sig, err = stringField(b, "signature", param); err != nil {
			return "", err
		}
	} else if sig, err = stringField(b, "data", param); err != nil {
		return "", err
	}
	reasoning, _, oerr := codec.open(sig, text)
	if oerr != nil {
		if typ == "thinking" {
			return "", invalid("%s: Invalid `signature` in `thinking` block: %v.", param, oerr)
		}
		return "", invalid("%s: Invalid `data` in `redacted_thinking` block: %v.", param, oerr)
	}
	return reasoning, nil
}

// parseTools converts Anthropic tool definitions into OpenAI-style
// function tools for the chat template.
func parseTools(raw json.RawMessage) ([]*chattemplate.Object, []mcpchat.Ref, *Error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	v, err := decodeRaw(raw, "tools", "a valid list")
	if err != nil {
		return nil, nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, nil, invalidType("tools", "a valid list", jsonkind.OfValue(v))
	}
	var refs []mcpchat.Ref
	out := make([]*chattemplate.Object, 0, len(list))
	seen := map[string]bool{}
	for i, item := range list {
		param := at("tools", i)
		t, ok := item.(*chattemplate.Object)
		if !ok {
			return nil, nil, invalidType(param, "a valid dictionary", jsonkind.OfValue(item))
		}
		if tv, ok := field(t, "type"); ok {
			typ, ok := tv.(string)
			if !ok {
				return nil, nil, invalidType(param+".type", "a valid string", jsonkind.OfValue(tv))
			}
			if typ == "mcp" {
				ref, err := mcpRef(t, param, "server_label", "allowed_tools")
				if err != nil {
					return nil, nil, err
				}
				refs = append(refs, ref)
				continue
			}
			if typ != "custom" {
				return nil, nil, invalid("%s.type: server and client tools of type '%s' are not supported by this server; define custom tools with name and input_schema.", param, typ)
			}
		}
		name, err := stringField(t, "name", param)
		if err != nil {
			return nil, nil, err
		}
		if name == "" {
			return nil, nil, invalid("%s.name: String should have at least 1 character", param)
		}
		if seen[name] {
			return nil, nil, invalid("tools: Tool names must be unique (%q repeats).", name)
		}
		seen[name] = true
		sv, ok := field(t, "input_schema")
		if !ok {
			return nil, nil, missing(param + ".input_schema")
		}
		schema, ok := sv.(*chattemplate.Object)
		if !ok {
			return nil, nil, invalidType(param+".input_schema", "a valid dictionary", jsonkind.OfValue(sv))
		}
		// strict (strict tool use) is accepted: a forced call's input is
		// constrained to input_schema whatever it says; calls the model
		// chooses to make (auto) are parsed as written.
		if sv, ok := field(t, "strict"); ok {
			if _, ok := sv.(bool); !ok {
				return nil, nil, invalidType(param+".strict", "a valid boolean", jsonkind.OfValue(sv))
			}
		}
		fn := chattemplate.NewObject("name", name)
		if dv, ok := field(t, "description"); ok {
			d, ok := dv.(string)
			if !ok {
				return nil, nil, invalidType(param+".description", "a valid string", jsonkind.OfValue(dv))
			}
			fn.Set("description", d)
		}
		fn.Set("parameters", schema)
		out = append(out, chattemplate.NewObject("type", "function", "function", fn))
	}
	return out, refs, nil
}

// parseToolChoice checks tool_choice: auto (also when absent), none, any
// or tool (with name), and disable_parallel_tool_use. any and tool force a
// call, which the engine constrains to the tool's input_schema.
func parseToolChoice(raw json.RawMessage, tools []*chattemplate.Object) (engine.ToolChoice, *Error) {
	var choice engine.ToolChoice
	if isNull(raw) {
		return choice, nil
	}
	v, err := decodeRaw(raw, "tool_choice", "a valid dictionary")
	if err != nil {
		return choice, err
	}
	obj, ok := v.(*chattemplate.Object)
	if !ok {
		return choice, invalidType("tool_choice", "a valid dictionary", jsonkind.OfValue(v))
	}
	typ, err := stringField(obj, "type", "tool_choice")
	if err != nil {
		return choice, err
	}
	if dv, ok := field(obj, "disable_parallel_tool_use"); ok {
		b, ok := dv.(bool)
		if !ok {
			return choice, invalidType("tool_choice.disable_parallel_tool_use", "a valid boolean", jsonkind.OfValue(dv))
		}
		choice.NoParallel = b
	}
	switch typ {
	case "auto":
		return choice, nil
	case "none":
		choice.Mode = engine.ToolNone
		return choice, nil
	case "any":
		choice.Mode = engine.ToolRequired
	case "tool":
		name, err := stringField(obj, "name", "tool_choice")
		if err != nil {
			return choice, err
		}
		if !slices.ContainsFunc(tools, func(t *chattemplate.Object) bool {
			fv, _ := t.Get("function")
			n, _ := fv.(*chattemplate.Object).Get("name")
			return n == name
		}) {
			return choice, invalid("tool_choice.name: no tool named %q in 'tools'.", name)
		}
		choice.Mode, choice.Name = engine.ToolNamed, name
	default:
		return choice, invalid("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
	}
	if len(tools) == 0 {
		return choice, invalid("tool_choice: type '%s' requires 'tools'.", typ)
	}
	return choice, nil
}

// parseThinking reads thinking: {"type": "enabled", "budget_tokens": N}
// (N ≥ 1024, and below max_tokens when maxTokens > 0) turns the template's
// thinking on and returns N, {"type": "disabled"} off; adaptive and
// between_tools turn it on without a budget.
func parseThinking(raw json.RawMessage, maxTokens int) (*bool, int, *Error) {
	if isNull(raw) {
		return nil, 0, nil
	}
	v, err := decodeRaw(raw, "thinking", "a valid dictionary")
	if err != nil {
		return nil, 0, err
	}
	obj, ok := v.(*chattemplate.Object)
	if !ok {
		return nil, 0, invalidType("thinking", "a valid dictionary", jsonkind.OfValue(v))
	}
	typ, err := stringField(obj, "type", "thinking")
	if err != nil {
		return nil, 0, err
	}
	on, budget := true, int64(0)
	switch typ {
	case "disabled":
		on = false
	case "enabled":
		bv, ok := field(obj, "budget_tokens")
		if !ok {
			return nil, 0, missing("thinking.enabled.budget_tokens")
		}
		if budget, ok = bv.(int64); !ok {
			return nil, 0, invalidType("thinking.enabled.budget_tokens", "a valid integer", jsonkind.OfValue(bv))
		}
		if budget < minThinkingBudget {
			return nil, 0, invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to %d", minThinkingBudget)
		}
		if maxTokens > 0 && budget >= int64(maxTokens) {
			return nil, 0, invalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
		}
	case "adaptive", "between_tools":
	default:
		return nil, 0, invalid("thinking.type: Input should be 'enabled', 'disabled', 'adaptive' or 'between_tools'")
	}
	return &on, int(budget), nil
}

// parseThinkingDisplay reads thinking.display: "summarized" (the default
// here: the thinking is shown) or "omitted" (thinking blocks come back
// empty, their signature sealing the text for the next turn). parseThinking
// has checked the rest of thinking.
func parseThinkingDisplay(raw json.RawMessage) (omit bool, e *Error) {
	if isNull(raw) {
		return false, nil
	}
	var t struct {
		Display json.RawMessage `json:"display"`
	}
	if err := json.Unmarshal(raw, &t); err != nil || isNull(t.Display) {
		return false, nil
	}
	var display string
	if err := json.Unmarshal(t.Display, &display); err != nil {
		return false, invalidType("thinking.display", "a valid string", jsonkind.Of(t.Display))
	}
	switch display {
	case "summarized":
		return false, nil
	case "omitted":
		return true, nil
	}
	return false, invalid("thinking.display: Input should be 'summarized' or 'omitted'")
}

// parseStopSequences reads stop_sequences: a list of strings.
func parseStopSequences(raw json.RawMessage) ([]string, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidType("stop_sequences", "a valid list of strings", jsonkind.Of(raw))
	}
	if len(list) > maxStops {
		return nil, invalid("stop_sequences: at most %d stop sequences, got %d.", maxStops, len(list))
	}
	return slices.DeleteFunc(list, func(s string) bool { return s == "" }), nil
}

// checkMetadata accepts metadata: an object with an optional string
// user_id.
func checkMetadata(raw json.RawMessage) *Error {
	if isNull(raw) {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return invalidType("metadata", "a valid dictionary", jsonkind.Of(raw))
	}
	if u, ok := m["user_id"]; ok && u != nil {
		if _, ok := u.(string); !ok {
			return invalidType("metadata.user_id", "a valid string", fmt.Sprintf("%T", u))
		}
	}
	return nil
}

// checkObject accepts a field that has no meaning on this server when it
// is absent, null or an object (its content is ignored).
func checkObject(raw json.RawMessage, param string) *Error {
	if isNull(raw) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return invalidType(param, "a valid dictionary", jsonkind.Of(raw))
	}
	return nil
}

// parseOutputFormat reads output_config (effort is accepted and ignored)
// and the beta's top-level output_format: a format {"type": "json_schema",
// "schema": {...}} asks for an answer whose text is JSON valid against the
// schema, which the engine enforces with the JSON-schema grammar of
// OpenAI's response_format (a schema it cannot compile is its 400, see
// plan.engineError). It returns the field the format came in.
func parseOutputFormat(config, beta json.RawMessage) (*engine.ResponseFormat, string, *Error) {
	var format json.RawMessage
	param := "output_config.format"
	if !isNull(config) {
		var c struct {
			Effort *string         `json:"effort"`
			Format json.RawMessage `json:"format"`
		}
		if err := json.Unmarshal(config, &c); err != nil {
			return nil, "", invalidType("output_config", "a valid dictionary", jsonkind.Of(config))
		}
		format = c.Format
	}
	if !isNull(beta) {
		if !isNull(format) {
			return nil, "", invalid("Both output_format and output_config.format were provided; use only output_config.format (output_format is deprecated).")
		}
		format, param = beta, "output_format"
	}
	if isNull(format) {
		return nil, "", nil
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(format, &f); err != nil {
		return nil, "", invalidType(param, "a valid dictionary", jsonkind.Of(format))
	}
	if isNull(f["type"]) {
		return nil, "", missing(param + ".type")
	}
	var typ string
	if json.Unmarshal(f["type"], &typ) != nil || typ != "json_schema" {
		return nil, "", invalid("%s.type: Input should be 'json_schema'", param)
	}
	schema := f["schema"]
	if isNull(schema) {
		return nil, "", missing(param + ".schema")
	}
	if jsonkind.Of(schema) != "an object" {
		return nil, "", invalidType(param+".schema", "a valid dictionary", jsonkind.Of(schema))
	}
	return &engine.ResponseFormat{Schema: schema}, param, nil
}

// samplingParams turns temperature (0..1, as Anthropic), top_p and top_k
// into sampler parameters.
func (req *MessagesRequest) samplingParams() (sample.Params, *Error) {
	p := sample.DefaultParams()
	if req.Temperature != nil {
		t := *req.Temperature
		if !(t >= 0 && t <= 1) {
			return p, invalid("temperature: Input should be less than or equal to 1 and greater than or equal to 0")
		}
		p.Temperature = t
	}
	if req.TopP != nil {
		t := *req.TopP
		if !(t >= 0 && t <= 1) {
			return p, invalid("top_p: Input should be less than or equal to 1 and greater than or equal to 0")
		}
		p.TopP = t
		if t == 0 {
			p.TopP = 5e-324 // the single most likely token
		}
	}
	if req.TopK != nil {
		if *req.TopK < 0 {
			return p, invalid("top_k: Input should be greater than or equal to 0")
		}
		p.TopK = *req.TopK
	}
	if err := p.Validate(); err != nil {
		return p, invalid("%v", err)
	}
	return p, nil
}

// parseTaskTag maps the contract's task_tag to a scheduling class.
func parseTaskTag(tag *string) (engine.Priority, *Error) {
	if tag == nil {
		return engine.PriorityBatch, nil
	}
	p, ok := engine.PriorityOf(*tag)
	if !ok {
		return 0, invalid("task_tag: %q is not one of claude_code, openclaw, background.", *tag)
	}
	return p, nil
}

// backendOverrides are the values of backend_override (the OpenAI
// dialect's): compute backends, "rapid" (speculative decoding) and
// "cloud" (an upstream provider).
var backendOverrides = []string{"mlx", "cpu", "rapid", engine.BackendCloud}

// applyBackend puts backend_override into r.
func applyBackend(b *string, r *engine.Request) *Error {
	switch {
	case b == nil || *b == "":
	case *b == "rapid":
		r.Speculative = true
	case slices.Contains(backendOverrides, *b):
		r.Backend = *b
	default:
		return invalid("backend_override: %q is not one of %s.", *b, strings.Join(backendOverrides, ", "))
	}
	return nil
}

// stopReason is Anthropic's stop_reason of a finished generation; a
// generation that made tool calls and stopped on its own ends in
// "tool_use".
func stopReason(ev engine.Event, toolCalls bool) (reason string, seq *string) {
	switch {
	case ev.StopSequence != "":
		s := ev.StopSequence
		return "stop_sequence", &s
	case ev.FinishReason == engine.FinishLength:
		return "max_tokens", nil
	case ev.FinishReason == engine.FinishContextWindow:
		return "model_context_window_exceeded", nil
	case ev.FinishReason == engine.FinishToolStepLimit:
		return "pause_turn", nil
	case toolCalls, ev.FinishReason == engine.FinishToolCalls:
		return "tool_use", nil
	}
	return "end_turn", nil
}

// usage converts the engine's final usage in Anthropic's accounting:
// input_tokens excludes the prompt tokens read from the prefix cache
// (cache_read_input_tokens) and those newly written to it
// (cache_creation_input_tokens); the three add up to the prompt.
func usage(u engine.Usage) Usage {
	out := Usage{InputTokens: u.PromptTokens - u.CachedTokens - u.CacheWriteTokens, OutputTokens: u.CompletionTokens,
		CacheReadInputTokens: u.CachedTokens, CacheCreationInputTokens: u.CacheWriteTokens}
	if u.DraftedTokens > 0 {
		out.Speculative = &SpeculativeUsage{Drafted: u.DraftedTokens, Accepted: u.AcceptedTokens}
	}
	return out
}
