package chattemplate

import "strings"

// Shape is the form in which a template wants the tool-call history of a
// conversation. Chat APIs disagree with templates here: OpenAI carries a
// call's arguments as a JSON text and an assistant message that only
// calls tools with content null; Anthropic carries the arguments as an
// object. Templates were trained on one of these and print the other
// wrongly (a Python dict repr, "None", or nothing at all), so the caller
// converts every conversation with Conform before rendering.
type Shape struct {
	// StringArguments: the template prints a call's arguments as they
	// are (DeepSeek V3), so they must be the JSON text; an object would
	// come out as a Python dict repr. When false, arguments that are a
	// JSON object text are handed over decoded (Qwen3, Llama 3.x with
	// tools print an object with tojson, and Llama would encode a
	// string a second time).
	StringArguments bool
	// NullCallContent: the template renders an assistant message's tool
	// calls only when its content is null (DeepSeek V3 renders a string
	// content instead of the calls), so an assistant message with calls
	// and empty or absent content gets content null. When false, an
	// assistant message's null or absent content becomes "" (templates
	// concatenate it: Python fails on None, or prints "None").
	NullCallContent bool
	// ThinkingField: the template reads an assistant message's reasoning
	// from "thinking" (gpt-oss's, which keeps the reasoning of the tool
	// calls of a turn in progress) and not from "reasoning_content",
	// which the engine's messages carry, so Conform copies it there.
	ThinkingField bool
}

// Probe values: arguments the template must reproduce as JSON text
// somewhere in its output. The object form comes out spaced (tojson), the
// string form is compact, so each can only be found if that form worked.
const (
	probeKey        = "fusion_probe_argument"
	probeValue      = "probe value"
	probeObjectJSON = `{"` + probeKey + `": "` + probeValue + `"}`
	probeStringJSON = `{"` + probeKey + `":"` + probeValue + `"}`
	// Gemma 4's template writes an object in its own notation (and a
	// string as it is, so the string form would show too, wrongly).
	probeObjectGemma = probeKey + `:<|"|>` + probeValue + `<|"|>`
)

// probeShape finds the template's Shape by rendering a short tool
// exchange in each form and looking for the arguments in the output. The
// first form that shows them wins, in the order: object with content "",
// string with content "", object with content null, string with content
// null. A template that shows them in no form (it does not render tool
// calls, or it raises) gets the zero Shape.
func (t *Template) probeShape() Shape {
	for _, nullContent := range []bool{false, true} {
		for _, stringArgs := range []bool{false, true} {
			out, err := t.Render(probeInput(stringArgs, nullContent))
			if err != nil {
				continue
			}
			want := probeObjectJSON
			if stringArgs {
				want = probeStringJSON
			}
			if strings.Contains(out, want) || !stringArgs && strings.Contains(out, probeObjectGemma) {
				sh := Shape{StringArguments: stringArgs, NullCallContent: nullContent}
				sh.ThinkingField = t.readsThinking(stringArgs, nullContent)
				return sh
			}
		}
	}
	return Shape{}
}

// probeReasoning is reasoning the thinking probe looks for.
const probeReasoning = "fusion probe reasoning"

// readsThinking reports whether the template shows the probe call's
// reasoning given as "thinking" but not given as "reasoning_content".
func (t *Template) readsThinking(stringArgs, nullContent bool) bool {
	shows := func(key string) bool {
		in := probeInput(stringArgs, nullContent)
		in.Messages[1] = clone(in.Messages[1]).Set(key, probeReasoning)
		out, err := t.Render(in)
		return err == nil && strings.Contains(out, probeReasoning)
	}
	return shows("thinking") && !shows("reasoning_content")
}

// probeInput is a user question, an assistant message calling one tool
// and the tool's answer. The call id has nine alphanumerics, which
// Mistral's templates require.
func probeInput(stringArgs, nullContent bool) Input {
	var args any = NewObject(probeKey, probeValue)
	if stringArgs {
		args = probeStringJSON
	}
	var content any = ""
	if nullContent {
		content = nil
	}
	tool := NewObject("type", "function", "function", NewObject(
		"name", "fusion_probe", "description", "A probe.",
		"parameters", NewObject("type", "object", "properties", NewObject(probeKey, NewObject("type", "string")))))
	call := NewObject("id", "fprobe001", "type", "function",
		"function", NewObject("name", "fusion_probe", "arguments", args))
	return Input{
		Messages: []*Object{
			NewObject("role", "user", "content", "Probe?"),
			NewObject("role", "assistant", "content", content, "tool_calls", []any{call}),
			NewObject("role", "tool", "tool_call_id", "fprobe001", "content", "Probed."),
		},
		Tools:               []*Object{tool},
		AddGenerationPrompt: true,
	}
}

// Shape returns the form the template wants tool-call history in, found
// when the template was compiled.
func (t *Template) Shape() Shape { return t.shape }

// Conform returns msgs in shape s. Messages it changes are copies (with
// copied tool calls); the others, and msgs itself, are not modified, so
// a request's messages can be conformed for several templates. Arguments
// that are not valid JSON, or not an object, stay as they are.
func (s Shape) Conform(msgs []*Object) []*Object {
	var out []*Object
	for i, m := range msgs {
		c := s.message(m)
		if c == m {
			continue
		}
		if out == nil {
			out = append([]*Object(nil), msgs...)
		}
		out[i] = c
	}
	if out == nil {
		return msgs
	}
	return out
}

// message conforms one message, returning m itself when nothing changes.
func (s Shape) message(m *Object) *Object {
	if role, _ := m.Get("role"); role != "assistant" {
		return m
	}
	cv, hasContent := m.Get("content")
	tv, _ := m.Get("tool_calls")
	calls, _ := tv.([]any)
	var (
		content    any = cv
		newContent     = false
	)
	switch {
	case s.NullCallContent && len(calls) > 0:
		if cv == "" || !hasContent {
			content, newContent = nil, true
		}
	case cv == nil:
		content, newContent = "", true
	}
	newCalls := make([]any, len(calls))
	changedCalls := false
	for i, c := range calls {
		newCalls[i] = c
		if nc, ok := s.call(c); ok {
			newCalls[i], changedCalls = nc, true
		}
	}
	thinking := s.thinking(m, content, len(calls) > 0)
	if !newContent && !changedCalls && thinking == nil {
		return m
	}
	out := clone(m)
	if newContent {
		out.Set("content", content)
	}
	if changedCalls {
		out.Set("tool_calls", newCalls)
	}
	if thinking != nil {
		out.Set("thinking", thinking)
	}
	return out
}

// thinking is the "thinking" to give an assistant message under
// ThinkingField (its reasoning_content), or nil. A message with calls and
// text keeps only its text there: gpt-oss's template shows that text as
// the calls' reasoning and refuses a message with both.
func (s Shape) thinking(m *Object, content any, hasCalls bool) any {
	if !s.ThinkingField {
		return nil
	}
	if _, ok := m.Get("thinking"); ok {
		return nil
	}
	r, _ := m.Get("reasoning_content")
	if text, ok := r.(string); !ok || text == "" {
		return nil
	}
	if c, _ := content.(string); hasCalls && c != "" {
		return nil
	}
	return r
}

// call conforms one tool call's function arguments: a copy and true, or
// false when nothing changes.
func (s Shape) call(c any) (*Object, bool) {
	call, ok := c.(*Object)
	if !ok {
		return nil, false
	}
	fv, _ := call.Get("function")
	fn, ok := fv.(*Object)
	if !ok {
		return nil, false
	}
	av, _ := fn.Get("arguments")
	var args any
	switch a := av.(type) {
	case string:
		if s.StringArguments {
			return nil, false
		}
		v, err := DecodeJSON([]byte(a))
		if _, isObj := v.(*Object); err != nil || !isObj {
			return nil, false
		}
		args = v
	case *Object:
		if !s.StringArguments {
			return nil, false
		}
		text, err := argumentsJSON(a)
		if err != nil {
			return nil, false
		}
		args = text
	default:
		return nil, false
	}
	return clone(call).Set("function", clone(fn).Set("arguments", args)), true
}

// argumentsJSON writes arguments the way the template's own tojson
// would: json.dumps with its default separators, non-ASCII kept.
func argumentsJSON(o *Object) (string, error) {
	v, err := toValue(o)
	if err != nil {
		return "", err
	}
	return encodePyJSON(v, pyJSONOptions{itemSep: ", ", keySep: ": "})
}

// clone returns a shallow copy of o, keys in the same order.
func clone(o *Object) *Object {
	out := &Object{}
	for _, k := range o.keys {
		out.Set(k, o.vals[k])
	}
	return out
}
