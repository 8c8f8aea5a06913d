package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/router/wire"
)

// toolEvents is one generation as the runner delivers it: reasoning, then
// text, then two complete tool calls, then the end.
func toolEvents() []engine.Event {
	return []engine.Event{
		{Reasoning: "Let me"},
		{Reasoning: " think."},
		{Text: "Checking."},
		{ToolCalls: []engine.ToolCall{{Index: 0, ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{ToolCalls: []engine.ToolCall{{Index: 1, ID: "call_b", Name: "noop", Arguments: `{}`}},
			Done: true, FinishReason: engine.FinishToolCalls, Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 9}},
	}
}

func TestChatStreamToolCalls(t *testing.T) {
	var evs []ev
	for _, e := range toolEvents() {
		evs = append(evs, ev{0, e})
	}
	got := streamChat(chatPlan(1, true, false), evs)
	const c = `"choices":[{"index":0,"delta":`
	const tail = `,"logprobs":null,"finish_reason":null}],"usage":null}`
	want := []string{
		head + c + `{"role":"assistant","content":""}` + tail,
		head + c + `{"reasoning_content":"Let me","reasoning":"Let me"}` + tail,
		head + c + `{"reasoning_content":" think.","reasoning":" think."}` + tail,
		head + c + `{"content":"Checking."}` + tail,
		head + c + `{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}` + tail,
		head + c + `{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Paris\"}"}}]}` + tail,
		head + c + `{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"noop","arguments":""}}]}` + tail,
		head + c + `{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}` + tail,
		head + c + `{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`,
		head + `"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestChatCollectorToolCalls(t *testing.T) {
	const body = `{"id":"chatcmpl-x","object":"chat.completion","created":100,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"message":`
	const usage = `"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`
	tests := []struct {
		name   string
		events []engine.Event
		want   string
	}{
		{"reasoning, text, two calls", toolEvents(), body +
			`{"role":"assistant","content":"Checking.","reasoning_content":"Let me think.","reasoning":"Let me think.","refusal":null,"tool_calls":[` +
			`{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},` +
			`{"id":"call_b","type":"function","function":{"name":"noop","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],` + usage},
		{"calls only: content null", toolEvents()[3:], body +
			`{"role":"assistant","content":null,"refusal":null,"tool_calls":[` +
			`{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},` +
			`{"id":"call_b","type":"function","function":{"name":"noop","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],` + usage},
		{"reasoning only", []engine.Event{{Reasoning: "hm"}, {Done: true, FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 9}}}, body +
			`{"role":"assistant","content":"","reasoning_content":"hm","reasoning":"hm","refusal":null,"tool_calls":null},"logprobs":null,"finish_reason":"length"}],` + usage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := chatPlan(1, false, false)
			p.stream = false
			c := newChatCollector(testMeta, p)
			for _, e := range tt.events {
				c.add(0, e)
			}
			b, err := wire.Marshal(c.result())
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}

func TestChatToolsRequest(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":null,"reasoning":"r","tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"n\":1}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"noop","arguments":"not json"}}]},` +
		`{"role":"tool","tool_call_id":"call_a","content":"sunny"}]`
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},{"type":"function","function":{"name":"noop"}}]`
	plan := func(t *testing.T, body string) *plan {
		t.Helper()
		var req ChatRequest
		if e := decodeJSON([]byte(body), &req); e != nil {
			t.Fatal(e)
		}
		p, e := req.toPlan(Options{}, "id", nil)
		if e != nil {
			t.Fatalf("toPlan: %+v", e)
		}
		return p
	}
	p := plan(t, `{"model":"m",`+msgs+`,`+tools+`,"tool_choice":"auto","parallel_tool_calls":false}`)
	r := p.reqs[0]
	if len(r.Tools) != 2 {
		t.Fatalf("tools: %d", len(r.Tools))
	}
	if b, _ := json.Marshal(r.Tools[0]); string(b) != `{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}` {
		t.Errorf("tool 0: %s", b)
	}
	if b, _ := json.Marshal(r.Messages[1]); string(b) != `{"role":"assistant","content":null,"reasoning":"r","tool_calls":[`+
		`{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"n\":1}"}},`+
		`{"id":"call_b","type":"function","function":{"name":"noop","arguments":"not json"}}],"reasoning_content":"r"}` {
		t.Errorf("assistant message: %s", b)
	}
	calls, _ := r.Messages[1].Get("tool_calls")
	fn, _ := calls.([]any)[0].(*chattemplate.Object).Get("function")
	// The text as sent: the engine decodes it for templates that want an
	// object, and DeepSeek V3 prints it as it is.
	if args, _ := fn.(*chattemplate.Object).Get("arguments"); args != `{"city":"Paris","n":1}` {
		t.Errorf("arguments are %#v, want the client's text", args)
	}
	if b, _ := json.Marshal(r.Messages[2]); string(b) != `{"role":"tool","tool_call_id":"call_a","content":"sunny"}` {
		t.Errorf("tool message: %s", b)
	}
	if p := plan(t, `{"model":"m",`+msgs+`,`+tools+`,"tool_choice":"none"}`); p.reqs[0].Tools != nil {
		t.Errorf("tool_choice none: tools passed to the template")
	}
	if p := plan(t, `{"model":"m",`+msgs+`,`+tools+`}`); len(p.reqs[0].Tools) != 2 {
		t.Errorf("no tool_choice: tools not passed")
	}
}

func TestChatToolsErrors(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body, param, code string
	}{
		{"bad name", `,"tools":[{"type":"function","function":{"name":"get weather"}}]`, "tools[0].function.name", "invalid_value"},
		{"long name", `,"tools":[{"type":"function","function":{"name":"` + strings.Repeat("a", 65) + `"}}]`, "tools[0].function.name", "invalid_value"},
		{"bad type", `,"tools":[{"type":"code","function":{"name":"f"}}]`, "tools[0].type", "invalid_value"},
		{"description number", `,"tools":[{"type":"function","function":{"name":"f","description":1}}]`, "tools[0].function.description", "invalid_type"},
		{"parameters array", `,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]`, "tools[0].function.parameters", "invalid_type"},
		{"required without tools", `,"tool_choice":"required"`, "tool_choice", "invalid_value"},
		{"named undeclared", `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`, "tool_choice", "invalid_value"},
		{"json mode of unknown type", `,"response_format":{"type":"yaml"}`, "response_format.type", "invalid_value"},
		{"history call without function", `,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function"}]}]`, "messages[0].tool_calls[0].function", "missing_required_parameter"},
		{"history arguments number", `,"messages":[{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":1}}]}]`, "messages[0].tool_calls[0].function.arguments", "invalid_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m",` + msgs + tt.body + `}`
			var req ChatRequest
			if e := decodeJSON([]byte(body), &req); e != nil {
				t.Fatal(e)
			}
			_, e := req.toPlan(Options{}, "id", nil)
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Param != tt.param || e.Code != tt.code || e.Status != 400 {
				t.Errorf("got %d %s %s (%s), want 400 %s %s", e.Status, e.Param, e.Code, e.Message, tt.param, tt.code)
			}
		})
	}
}

// TestResponseFormatToEngine: JSON modes reach the engine request (the
// engine compiles the schema and refuses what it cannot enforce).
func TestResponseFormatToEngine(t *testing.T) {
	tests := []struct {
		name, body string
		want       *engine.ResponseFormat
	}{
		{"text", `{"type":"text"}`, nil},
		{"json_object", `{"type":"json_object"}`, &engine.ResponseFormat{}},
		{"json_schema", `{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object"},"strict":true}}`, &engine.ResponseFormat{Schema: []byte(`{"type":"object"}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req ChatRequest
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":` + tt.body + `}`
			if e := decodeJSON([]byte(body), &req); e != nil {
				t.Fatal(e)
			}
			p, e := req.toPlan(Options{}, "id", nil)
			if e != nil {
				t.Fatal(e)
			}
			got := p.reqs[0].ResponseFormat
			if (got == nil) != (tt.want == nil) || (got != nil && string(got.Schema) != string(tt.want.Schema)) {
				t.Errorf("response format %+v, want %+v", got, tt.want)
			}
		})
	}
}
