package openai

import (
	"encoding/json"
	"fmt"
	"fusion/router/jsonkind"
	"regexp"
	"slices"
	"strings"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/router/mcpchat"
)

// chatRoles are the message roles the chat API takes. "developer" is
// rendered as "system": chat templates know only the latter.
var chatRoles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// toPlan checks a chat request and converts it into one engine request per
// choice.
func (req *ChatRequest) toPlan(opts Options, id string, mc *mcpchat.Runner) (*plan, *Error) {
	if req.Model == "" {
		return nil, missingParam("model")
	}
	if isNull(req.Messages) {
		return nil, missingParam("messages")
	}
	msgs, err := parseMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	tools, refs, err := parseTools(req.Tools)
	if err != nil {
		return nil, err
	}
	mcpTools, err := resolveMCP(mc, refs, tools)
	if err != nil {
		return nil, err
	}
	if mcpTools != nil {
		tools = append(tools, mcpTools.Definitions()...)
	}
	choice, err := checkToolChoice(req.ToolChoice, tools, mcpTools)
	if err != nil {
		return nil, err
	}
	if choice.Mode == engine.ToolNone {
		tools = nil // the model must not call tools: it is not shown them
	}
	choice.NoParallel = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	format, err := parseResponseFormat(req.ResponseFormat)
	if err != nil {
		return nil, err
	}

	base := engine.Request{ID: id, Model: req.Model, Messages: msgs, Tools: tools, ToolChoice: choice, ChatTemplateKwargs: req.ChatTemplateKwargs, ResponseFormat: format}
	maxTokens, param := req.MaxTokens, "max_tokens"
	if req.MaxCompletionTokens != nil {
		maxTokens, param = req.MaxCompletionTokens, "max_completion_tokens"
	}
	n, stream, includeUsage, err := req.convertCommon(opts, &base, maxTokens, param)
	if err != nil {
		return nil, err
	}
	if err := req.applyThinking(&base); err != nil {
		return nil, err
	}
	logprobs := req.Logprobs != nil && *req.Logprobs
	top := 0
	if req.TopLogprobs != nil {
		top = *req.TopLogprobs
	}
	if base.Sampling, err = req.samplingParams(logprobs, top); err != nil {
		return nil, err
	}
	p := &plan{stream: stream, includeUsage: includeUsage, logprobs: logprobs, topLogprobs: top, mcp: mcpTools}
	if choice.Mode == engine.ToolNone {
		p.mcp = nil // no calls to run
	}
	p.reqs = fanOut(&base, n)
	p.promptOf = make([]int, n)
	return p, nil
}

// fanOut copies base n times; choice i > 0 of a seeded request gets seed
// seed+i, so the choices differ while choice 0 matches an n=1 request.
func fanOut(base *engine.Request, n int) []*engine.Request {
	out := make([]*engine.Request, n)
	for i := range out {
		r := *base
		if i > 0 {
			r.ID = fmt.Sprintf("%s-%d", base.ID, i)
			if base.Sampling.Seed != nil {
				s := *base.Sampling.Seed + int64(i)
				r.Sampling.Seed = &s
			}
		}
		out[i] = &r
	}
	return out
}

// parseMessages checks messages and returns them as ordered objects for
// the chat template, each content flattened to a string.
func parseMessages(raw json.RawMessage) ([]*chattemplate.Object, *Error) {
	v, derr := chattemplate.DecodeJSON(raw)
	if derr != nil {
		return nil, invalidType("messages", "an array of message objects", jsonkind.Of(raw))
	}
	list, ok := v.([]any)
	if !ok {
		return nil, invalidType("messages", "an array of message objects", jsonkind.OfValue(v))
	}
	if len(list) == 0 {
		return nil, invalidRequest("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	out := make([]*chattemplate.Object, len(list))
	for i, item := range list {
		param := fmt.Sprintf("messages[%d]", i)
		m, ok := item.(*chattemplate.Object)
		if !ok {
			return nil, invalidType(param, "an object", jsonkind.OfValue(item))
		}
		msg, err := checkMessage(m, param)
		if err != nil {
			return nil, err
		}
		out[i] = msg
	}
	return out, nil
}

func checkMessage(m *chattemplate.Object, param string) (*chattemplate.Object, *Error) {
	rv, ok := m.Get("role")
	if !ok || rv == nil {
		return nil, missingParam(param + ".role")
	}
	role, ok := rv.(string)
	if !ok {
		return nil, invalidType(param+".role", "a string", jsonkind.OfValue(rv))
	}
	if !slices.Contains(chatRoles, role) {
		return nil, invalidRequest(param+".role", "Invalid value: '%s'. Supported values are: %s.", role, quoteList(chatRoles))
	}
	out := &chattemplate.Object{}
	for _, k := range m.Keys() {
		v, _ := m.Get(k)
		out.Set(k, v)
	}
	if role == "developer" {
		out.Set("role", "system")
	}
	cv, has := m.Get("content")
	switch c := cv.(type) {
	case string:
	case nil:
		if role != "assistant" {
			if !has {
				return nil, missingParam(param + ".content")
			}
			return nil, invalidType(param+".content", "a string or an array of content parts", "null")
		}
	case []any:
		text, err := flattenContent(c, param+".content")
		if err != nil {
			return nil, err
		}
		out.Set("content", text)
	default:
		return nil, invalidType(param+".content", "a string or an array of content parts", jsonkind.OfValue(cv))
	}
	if nv, ok := m.Get("name"); ok && nv != nil {
		if _, ok := nv.(string); !ok {
			return nil, invalidType(param+".name", "a string", jsonkind.OfValue(nv))
		}
	}
	if role == "tool" {
		tv, ok := m.Get("tool_call_id")
		if !ok || tv == nil {
			return nil, missingParam(param + ".tool_call_id")
		}
		if _, ok := tv.(string); !ok {
			return nil, invalidType(param+".tool_call_id", "a string", jsonkind.OfValue(tv))
		}
	}
	if tc, ok := m.Get("tool_calls"); ok && tc != nil {
		list, ok := tc.([]any)
		if !ok {
			return nil, invalidType(param+".tool_calls", "an array", jsonkind.OfValue(tc))
		}
		calls, err := templateToolCalls(list, param+".tool_calls")
		if err != nil {
			return nil, err
		}
		out.Set("tool_calls", calls)
	}
	// Templates read the reasoning of earlier turns as reasoning_content;
	// clients that echo "reasoning" get it there too.
	if _, ok := m.Get("reasoning_content"); !ok {
		if rv, ok := m.Get("reasoning"); ok {
			if r, ok := rv.(string); ok && r != "" {
				out.Set("reasoning_content", r)
			}
		}
	}
	return out, nil
}

// templateToolCalls checks an assistant message's tool_calls and returns
// them for the chat template. Arguments stay the text the client sent:
// the engine hands each template the form it expects (a decoded object
// for Qwen3 and Llama, this very text for DeepSeek V3; see
// chattemplate.Shape).
func templateToolCalls(list []any, param string) ([]any, *Error) {
	out := make([]any, len(list))
	for j, item := range list {
		pp := fmt.Sprintf("%s[%d]", param, j)
		call, ok := item.(*chattemplate.Object)
		if !ok {
			return nil, invalidType(pp, "an object", jsonkind.OfValue(item))
		}
		c := &chattemplate.Object{}
		for _, k := range call.Keys() {
			v, _ := call.Get(k)
			c.Set(k, v)
		}
		fv, _ := call.Get("function")
		f, ok := fv.(*chattemplate.Object)
		if !ok {
			return nil, missingParam(pp + ".function")
		}
		fn := &chattemplate.Object{}
		for _, k := range f.Keys() {
			v, _ := f.Get(k)
			fn.Set(k, v)
		}
		if nv, _ := f.Get("name"); nv == nil {
			return nil, missingParam(pp + ".function.name")
		} else if _, ok := nv.(string); !ok {
			return nil, invalidType(pp+".function.name", "a string", jsonkind.OfValue(nv))
		}
		av, _ := fn.Get("arguments")
		switch a := av.(type) {
		case string, *chattemplate.Object, nil:
		default:
			return nil, invalidType(pp+".function.arguments", "a string", jsonkind.OfValue(a))
		}
		c.Set("function", fn)
		out[j] = c
	}
	return out, nil
}

// flattenContent joins the text parts of a content array with newlines,
// as vLLM does for templates that take a string.
func flattenContent(parts []any, param string) (string, *Error) {
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		obj, ok := p.(*chattemplate.Object)
		if !ok {
			return "", invalidType(pp, "a content part object", jsonkind.OfValue(p))
		}
		tv, _ := obj.Get("type")
		typ, ok := tv.(string)
		if !ok {
			return "", missingParam(pp + ".type")
		}
		switch typ {
		case "text", "input_text", "refusal":
			key := "text"
			if typ == "refusal" {
				key = "refusal"
			}
			s, ok := obj.Get(key)
			str, isStr := s.(string)
			if !ok || !isStr {
				return "", invalidType(pp+"."+key, "a string", jsonkind.OfValue(s))
			}
			texts = append(texts, str)
		case "image_url", "input_image", "input_audio", "file", "audio", "video":
			return "", unsupported(pp+".type", "Content parts of type '%s' are not supported by this server; send text.", typ)
		default:
			return "", invalidRequest(pp+".type", "Invalid value: '%s'. Supported values are: 'text'.", typ)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// toolName is what OpenAI allows as a function name.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// parseToolList checks tool definitions in OpenAI's format and returns
// them, as sent, for the chat template; MCP tools are refused (where the
// server runs no tools for the model).
func parseToolList(raw json.RawMessage) ([]*chattemplate.Object, *Error) {
	tools, refs, err := parseTools(raw)
	if err == nil && len(refs) > 0 {
		return nil, invalidRequest(refs[0].Param+".type", "Invalid value: 'mcp'. MCP tools are run by the server only in chat completions and messages; supported values here are: 'function'.")
	}
	return tools, err
}

// parseTools checks tool definitions in OpenAI's format: the functions,
// as sent, for the chat template, and the MCP servers asked for with
// OpenAI Responses' {"type": "mcp", "server_label", "allowed_tools"}.
func parseTools(raw json.RawMessage) ([]*chattemplate.Object, []mcpchat.Ref, *Error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	v, derr := chattemplate.DecodeJSON(raw)
	list, ok := v.([]any)
	if derr != nil || !ok {
		return nil, nil, invalidType("tools", "an array of tool objects", jsonkind.Of(raw))
	}
	out := make([]*chattemplate.Object, 0, len(list))
	var refs []mcpchat.Ref
	for i, item := range list {
		param := fmt.Sprintf("tools[%d]", i)
		t, ok := item.(*chattemplate.Object)
		if !ok {
			return nil, nil, invalidType(param, "an object", jsonkind.OfValue(item))
		}
		if tv, _ := t.Get("type"); tv == "mcp" {
			ref, err := parseMCPTool(t, param)
			if err != nil {
				return nil, nil, err
			}
			refs = append(refs, ref)
			continue
		} else if tv != "function" {
			return nil, nil, invalidRequest(param+".type", "Invalid value for '%s.type': expected 'function' or 'mcp'.", param)
		}
		fv, _ := t.Get("function")
		f, ok := fv.(*chattemplate.Object)
		if !ok {
			return nil, nil, missingParam(param + ".function")
		}
		if nv, _ := f.Get("name"); nv == nil || nv == "" {
			return nil, nil, missingParam(param + ".function.name")
		} else if name, ok := nv.(string); !ok {
			return nil, nil, invalidType(param+".function.name", "a string", jsonkind.OfValue(nv))
		} else if !toolName.MatchString(name) {
			return nil, nil, invalidRequest(param+".function.name", "Invalid '%s.function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.", param)
		}
		if dv, ok := f.Get("description"); ok && dv != nil {
			if _, ok := dv.(string); !ok {
				return nil, nil, invalidType(param+".function.description", "a string", jsonkind.OfValue(dv))
			}
		}
		if pv, ok := f.Get("parameters"); ok && pv != nil {
			if _, ok := pv.(*chattemplate.Object); !ok {
				return nil, nil, invalidType(param+".function.parameters", "an object", jsonkind.OfValue(pv))
			}
		}
		out = append(out, t)
	}
	return out, refs, nil
}

// checkToolChoice reads tool_choice: "auto" (the default, also when
// absent), "none", "required", {"type": "function", "function": {"name"}}
// naming one of tools, or OpenAI Responses' {"type": "mcp",
// "server_label", "name"?} naming one of the request's MCP servers (and
// tool). The engine constrains forced calls to the model's call format
// and the tool's parameters.
func checkToolChoice(raw json.RawMessage, tools []*chattemplate.Object, mcpTools *mcpchat.Toolset) (engine.ToolChoice, *Error) {
	if isNull(raw) {
		return engine.ToolChoice{}, nil
	}
	v, derr := chattemplate.DecodeJSON(raw)
	if derr != nil {
		return engine.ToolChoice{}, invalidType("tool_choice", "a string or an object", jsonkind.Of(raw))
	}
	var choice engine.ToolChoice
	switch c := v.(type) {
	case string:
		switch c {
		case "auto":
			return choice, nil
		case "none":
			choice.Mode = engine.ToolNone
			return choice, nil
		case "required":
			choice.Mode = engine.ToolRequired
		default:
			return choice, invalidRequest("tool_choice", "Invalid value: '%s'. Supported values are: 'none', 'auto' and 'required'.", c)
		}
	case *chattemplate.Object:
		tv, _ := c.Get("type")
		if tv == "mcp" {
			return mcpToolChoice(c, tools, mcpTools)
		}
		if tv != "function" {
			return choice, invalidRequest("tool_choice.type", "Invalid value for 'tool_choice.type': expected 'function' or 'mcp'.")
		}
		fv, _ := c.Get("function")
		fn, ok := fv.(*chattemplate.Object)
		if !ok {
			return choice, missingParam("tool_choice.function")
		}
		nv, _ := fn.Get("name")
		name, ok := nv.(string)
		if !ok || name == "" {
			return choice, missingParam("tool_choice.function.name")
		}
		if !slices.Contains(toolNames(tools), name) {
			return choice, invalidRequest("tool_choice", "Invalid value for 'tool_choice': function '%s' is not among the declared 'tools'.", name)
		}
		choice.Mode, choice.Name = engine.ToolNamed, name
	default:
		return choice, invalidType("tool_choice", "a string or an object", jsonkind.OfValue(v))
	}
	if len(tools) == 0 {
		return choice, invalidRequest("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
	}
	return choice, nil
}

// toolNames lists the function names of checked tool definitions.
func toolNames(tools []*chattemplate.Object) []string {
	var names []string
	for _, t := range tools {
		fv, _ := t.Get("function")
		if fn, ok := fv.(*chattemplate.Object); ok {
			if n, ok := fn.Get("name"); ok {
				if s, ok := n.(string); ok {
					names = append(names, s)
				}
			}
		}
	}
	return names
}

// parseResponseFormat reads response_format: "text" (nil), "json_object"
// (any JSON object) or "json_schema" with json_schema.schema; the engine
// compiles the schema and refuses keywords it cannot enforce.
func parseResponseFormat(raw json.RawMessage) (*engine.ResponseFormat, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	var rf struct {
		Type       any `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, invalidType("response_format", "an object", jsonkind.Of(raw))
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &engine.ResponseFormat{}, nil
	case "json_schema":
		if rf.JSONSchema == nil {
			return nil, missingParam("response_format.json_schema")
		}
		if isNull(rf.JSONSchema.Schema) {
			return &engine.ResponseFormat{}, nil
		}
		return &engine.ResponseFormat{Schema: rf.JSONSchema.Schema}, nil
	case nil:
		return nil, missingParam("response_format.type")
	}
	return nil, invalidRequest("response_format.type", "Invalid value: %v. Supported values are: 'text', 'json_object' and 'json_schema'.", rf.Type)
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = "'" + x + "'"
	}
	return strings.Join(q, ", ")
}
