package cloud

import (
	"encoding/json"
	"fmt"
	"sort"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/sample"
)

// openAIBody is req as an OpenAI chat completions request (streamed, with
// usage) for the upstream's model.
func openAIBody(req *engine.Request, model string) ([]byte, error) {
	msgs := make([]any, 0, len(req.Messages))
	for _, m := range req.Messages {
		msgs = append(msgs, openAIMessage(m))
	}
	b := map[string]any{
		"model":          model,
		"messages":       msgs,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	if req.MaxTokens > 0 {
		b["max_tokens"] = req.MaxTokens
	}
	if len(req.Stop) > 0 {
		b["stop"] = req.Stop
	}
	samplingFields(b, req.Sampling, true)
	if len(req.Tools) > 0 {
		b["tools"] = req.Tools
		switch req.ToolChoice.Mode {
		case engine.ToolNone:
			b["tool_choice"] = "none"
		case engine.ToolRequired:
			b["tool_choice"] = "required"
		case engine.ToolNamed:
			b["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": req.ToolChoice.Name}}
		}
		if req.ToolChoice.NoParallel {
			b["parallel_tool_calls"] = false
		}
	}
	if rf := req.ResponseFormat; rf != nil {
		if rf.Schema == nil {
			b["response_format"] = map[string]any{"type": "json_object"}
		} else {
			b["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": "response", "schema": json.RawMessage(rf.Schema)}}
		}
	}
	return json.Marshal(b)
}

// samplingFields adds the sampling parameters that differ from the
// defaults (temperature 1, top_p 1, the rest off); openAI adds OpenAI's
// penalties and seed too.
func samplingFields(b map[string]any, p sample.Params, openAI bool) {
	d := sample.DefaultParams()
	if p.Temperature != d.Temperature {
		b["temperature"] = p.Temperature
	}
	if p.TopP != d.TopP && p.TopP > 0 {
		b["top_p"] = p.TopP
	}
	if p.TopK > 0 {
		b["top_k"] = p.TopK
	}
	if !openAI {
		return
	}
	if p.MinP > 0 {
		b["min_p"] = p.MinP
	}
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != d.RepetitionPenalty {
		b["repetition_penalty"] = p.RepetitionPenalty
	}
	if p.PresencePenalty != 0 {
		b["presence_penalty"] = p.PresencePenalty
	}
	if p.FrequencyPenalty != 0 {
		b["frequency_penalty"] = p.FrequencyPenalty
	}
	if p.Seed != nil {
		b["seed"] = *p.Seed
	}
}

// openAIMessage is a neutral (chat template) message in OpenAI's shape:
// tool call arguments as JSON text; the reasoning of earlier turns is
// not sent (OpenAI-compatible servers disagree on its field).
func openAIMessage(m *chattemplate.Object) map[string]any {
	out := map[string]any{}
	for _, k := range m.Keys() {
		v, _ := m.Get(k)
		switch k {
		case "reasoning_content", "reasoning":
			continue
		case "tool_calls":
			list, _ := v.([]any)
			calls := make([]any, 0, len(list))
			for _, item := range list {
				c, ok := item.(*chattemplate.Object)
				if !ok {
					continue
				}
				calls = append(calls, openAIToolCall(c))
			}
			v = calls
		}
		out[k] = v
	}
	return out
}

func openAIToolCall(c *chattemplate.Object) map[string]any {
	out := map[string]any{"type": "function"}
	if id, ok := c.Get("id"); ok {
		out["id"] = id
	}
	fv, _ := c.Get("function")
	f, _ := fv.(*chattemplate.Object)
	fn := map[string]any{}
	if f != nil {
		name, _ := f.Get("name")
		fn["name"] = name
		fn["arguments"] = argumentsText(f)
	}
	out["function"] = fn
	return out
}

// argumentsText is a tool call's arguments as JSON text (templates may
// have them decoded).
func argumentsText(f *chattemplate.Object) string {
	av, _ := f.Get("arguments")
	switch a := av.(type) {
	case string:
		return a
	case nil:
		return "{}"
	default:
		raw, err := json.Marshal(a)
		if err != nil {
			return "{}"
		}
		return string(raw)
	}
}

// openAIDecoder reads a chat completions stream.
type openAIDecoder struct {
	calls  map[int]*engine.ToolCall // tool calls being streamed, by index
	finish engine.FinishReason
	usage  engine.Usage
	seen   bool // a choice or usage arrived
}

type openAIChunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (d *openAIDecoder) event(_ string, data []byte) ([]engine.Event, bool, error) {
	if string(data) == "[DONE]" {
		evs, err := d.end()
		return evs, true, err
	}
	var ch openAIChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return nil, false, fmt.Errorf("%w: a stream chunk is not JSON: %v", engine.ErrUpstream, err)
	}
	if len(ch.Error) > 0 {
		_, msg := errorMessage([]byte(`{"error":` + string(ch.Error) + `}`))
		return nil, false, fmt.Errorf("%w: error in the stream: %s", engine.ErrUpstream, msg)
	}
	var evs []engine.Event
	for _, c := range ch.Choices {
		if c.Index != 0 { // one choice is asked for
			continue
		}
		d.seen = true
		var ev engine.Event
		if c.Delta.Content != nil {
			ev.Text = *c.Delta.Content
		}
		if c.Delta.ReasoningContent != nil {
			ev.Reasoning = *c.Delta.ReasoningContent
		} else if c.Delta.Reasoning != nil {
			ev.Reasoning = *c.Delta.Reasoning
		}
		for _, tc := range c.Delta.ToolCalls {
			if d.calls == nil {
				d.calls = map[int]*engine.ToolCall{}
			}
			call := d.calls[tc.Index]
			if call == nil {
				call = &engine.ToolCall{Index: tc.Index}
				d.calls[tc.Index] = call
			}
			if tc.ID != "" {
				call.ID = tc.ID
			}
			call.Name += tc.Function.Name
			call.Arguments += tc.Function.Arguments
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			d.finish = finishOf(*c.FinishReason)
		}
		if ev.Text != "" || ev.Reasoning != "" {
			evs = append(evs, ev)
		}
	}
	if u := ch.Usage; u != nil {
		d.seen = true
		d.usage.PromptTokens, d.usage.CompletionTokens = u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			d.usage.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	return evs, false, nil
}

func (d *openAIDecoder) end() ([]engine.Event, error) {
	if !d.seen || d.finish == "" {
		return nil, fmt.Errorf("%w: the stream ended before the answer did", engine.ErrUpstream)
	}
	var calls []engine.ToolCall
	idx := make([]int, 0, len(d.calls))
	for i := range d.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for n, i := range idx {
		c := *d.calls[i]
		c.Index = n
		if c.Arguments == "" {
			c.Arguments = "{}"
		}
		calls = append(calls, c)
	}
	return finalEvents(calls, d.finish, d.usage), nil
}

// finalEvents are the end of an answer: its tool calls (if any), then the
// final event.
func finalEvents(calls []engine.ToolCall, finish engine.FinishReason, u engine.Usage) []engine.Event {
	var evs []engine.Event
	if len(calls) > 0 {
		evs = append(evs, engine.Event{ToolCalls: calls})
	}
	return append(evs, engine.Event{Done: true, FinishReason: finish, Usage: u})
}

// finishOf maps OpenAI's finish_reason.
func finishOf(r string) engine.FinishReason {
	switch r {
	case "length":
		return engine.FinishLength
	case "tool_calls", "function_call":
		return engine.FinishToolCalls
	}
	return engine.FinishStop
}
