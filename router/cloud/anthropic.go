package cloud

import (
	"encoding/json"
	"fmt"
	"strings"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/prompt"
)

// anthropicBody is req as an Anthropic Messages request (streamed) for
// the upstream's model: system messages become the system prompt, tool
// calls tool_use blocks, tool messages tool_result blocks of a user turn.
func anthropicBody(req *engine.Request, model string) ([]byte, error) {
	if req.ResponseFormat != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("response_format is not supported by Anthropic-compatible cloud upstreams")}
	}
	var (
		system []string
		msgs   []map[string]any
	)
	// add appends blocks to a turn of role, merging consecutive turns of
	// one role (the Messages API alternates).
	add := func(role string, blocks ...any) {
		if n := len(msgs); n > 0 && msgs[n-1]["role"] == role {
			msgs[n-1]["content"] = append(msgs[n-1]["content"].([]any), blocks...)
			return
		}
		msgs = append(msgs, map[string]any{"role": role, "content": blocks})
	}
	for _, m := range req.Messages {
		role, _ := getString(m, "role")
		content, _ := getString(m, "content")
		switch role {
		case "system":
			system = append(system, content)
		case "tool":
			id, _ := getString(m, "tool_call_id")
			add("user", map[string]any{"type": "tool_result", "tool_use_id": id, "content": content})
		case "assistant":
			var blocks []any
			if content != "" {
				blocks = append(blocks, map[string]any{"type": "text", "text": content})
			}
			tv, _ := m.Get("tool_calls")
			list, _ := tv.([]any)
			for _, item := range list {
				c, ok := item.(*chattemplate.Object)
				if !ok {
					continue
				}
				id, _ := getString(c, "id")
				fv, _ := c.Get("function")
				f, _ := fv.(*chattemplate.Object)
				if f == nil {
					continue
				}
				name, _ := getString(f, "name")
				input := json.RawMessage(argumentsText(f))
				if !json.Valid(input) {
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": id, "name": name, "input": input})
			}
			if len(blocks) > 0 {
				add("assistant", blocks...)
			}
		default:
			add("user", map[string]any{"type": "text", "text": content})
		}
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	b := map[string]any{"model": model, "messages": msgs, "max_tokens": maxTokens, "stream": true}
	if len(system) > 0 {
		b["system"] = strings.Join(system, "\n")
	}
	if len(req.Stop) > 0 {
		b["stop_sequences"] = req.Stop
	}
	samplingFields(b, req.Sampling, false)
	if len(req.Tools) > 0 {
		tools := make([]any, 0, len(req.Tools))
		for _, t := range req.Tools {
			fv, _ := t.Get("function")
			f, ok := fv.(*chattemplate.Object)
			if !ok {
				continue
			}
			name, _ := getString(f, "name")
			tool := map[string]any{"name": name, "input_schema": map[string]any{"type": "object"}}
			if d, ok := getString(f, "description"); ok {
				tool["description"] = d
			}
			if p, ok := f.Get("parameters"); ok && p != nil {
				tool["input_schema"] = p
			}
			tools = append(tools, tool)
		}
		b["tools"] = tools
		choice := map[string]any{"type": "auto"}
		switch req.ToolChoice.Mode {
		case engine.ToolNone:
			choice = map[string]any{"type": "none"}
		case engine.ToolRequired:
			choice = map[string]any{"type": "any"}
		case engine.ToolNamed:
			choice = map[string]any{"type": "tool", "name": req.ToolChoice.Name}
		}
		if req.ToolChoice.NoParallel && req.ToolChoice.Mode != engine.ToolNone {
			choice["disable_parallel_tool_use"] = true
		}
		b["tool_choice"] = choice
	}
	if req.EnableThinking != nil && *req.EnableThinking && req.ReasoningBudget > 0 {
		b["thinking"] = map[string]any{"type": "enabled", "budget_tokens": req.ReasoningBudget}
	}
	return json.Marshal(b)
}

func getString(o *chattemplate.Object, key string) (string, bool) {
	v, ok := o.Get(key)
	s, isStr := v.(string)
	return s, ok && isStr
}

// anthropicDecoder reads a Messages stream.
type anthropicDecoder struct {
	blocks  map[int]*engine.ToolCall // tool_use blocks being streamed, by block index
	calls   []engine.ToolCall
	finish  engine.FinishReason
	stopSeq string
	usage   engine.Usage
	started bool
}

type anthropicEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message *struct {
		Usage anthropicUsage `json:"usage"`
	} `json:"message"`
	ContentBlock *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type         string  `json:"type"`
		Text         string  `json:"text"`
		Thinking     string  `json:"thinking"`
		PartialJSON  string  `json:"partial_json"`
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

func (d *anthropicDecoder) event(_ string, data []byte) ([]engine.Event, bool, error) {
	var e anthropicEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, false, fmt.Errorf("%w: a stream event is not JSON: %v", engine.ErrUpstream, err)
	}
	switch e.Type {
	case "message_start":
		d.started = true
		if e.Message != nil {
			u := e.Message.Usage
			// Anthropic counts cached prompt tokens apart; the neutral
			// usage counts them inside the prompt.
			d.usage.PromptTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
			d.usage.CachedTokens, d.usage.CacheWriteTokens = u.CacheReadInputTokens, u.CacheCreationInputTokens
			d.usage.CompletionTokens = u.OutputTokens
		}
	case "content_block_start":
		if b := e.ContentBlock; b != nil && b.Type == "tool_use" {
			if d.blocks == nil {
				d.blocks = map[int]*engine.ToolCall{}
			}
			d.blocks[e.Index] = &engine.ToolCall{ID: b.ID, Name: b.Name}
		}
	case "content_block_delta":
		if e.Delta == nil {
			break
		}
		switch e.Delta.Type {
		case "text_delta":
			if e.Delta.Text != "" {
				return []engine.Event{{Text: e.Delta.Text}}, false, nil
			}
		case "thinking_delta":
			if e.Delta.Thinking != "" {
				return []engine.Event{{Reasoning: e.Delta.Thinking}}, false, nil
			}
		case "input_json_delta":
			if c := d.blocks[e.Index]; c != nil {
				c.Arguments += e.Delta.PartialJSON
			}
		}
	case "content_block_stop":
		if c := d.blocks[e.Index]; c != nil {
			delete(d.blocks, e.Index)
			call := *c
			call.Index = len(d.calls)
			if strings.TrimSpace(call.Arguments) == "" {
				call.Arguments = "{}"
			}
			d.calls = append(d.calls, call)
		}
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != nil {
			d.finish = stopReasonOf(*e.Delta.StopReason)
			if e.Delta.StopSequence != nil {
				d.stopSeq = *e.Delta.StopSequence
			}
		}
		if e.Usage != nil {
			d.usage.CompletionTokens = e.Usage.OutputTokens
		}
	case "message_stop":
		evs, err := d.end()
		return evs, true, err
	case "error":
		msg := "(no message)"
		if e.Error != nil {
			msg = e.Error.Type + ": " + e.Error.Message
		}
		return nil, false, fmt.Errorf("%w: error in the stream: %s", engine.ErrUpstream, msg)
	}
	return nil, false, nil
}

func (d *anthropicDecoder) end() ([]engine.Event, error) {
	if !d.started || d.finish == "" {
		return nil, fmt.Errorf("%w: the stream ended before the answer did", engine.ErrUpstream)
	}
	evs := finalEvents(d.calls, d.finish, d.usage)
	evs[len(evs)-1].StopSequence = d.stopSeq
	return evs, nil
}

// stopReasonOf maps Anthropic's stop_reason.
func stopReasonOf(r string) engine.FinishReason {
	switch r {
	case "max_tokens":
		return engine.FinishLength
	case "tool_use":
		return engine.FinishToolCalls
	case "model_context_window_exceeded":
		return engine.FinishContextWindow
	}
	return engine.FinishStop
}
