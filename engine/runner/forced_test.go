package runner

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/parser"
	"fusion/engine/prompt"
)

func functionTool(name, params string) *chattemplate.Object {
	fn := chattemplate.NewObject("name", name)
	if params != "" {
		p, err := chattemplate.DecodeJSON([]byte(params))
		if err != nil {
			panic(err)
		}
		fn.Set("parameters", p)
	}
	return chattemplate.NewObject("type", "function", "function", fn)
}

// TestForcedToolCalls: with random weights, a forced tool choice yields
// real tool calls of the allowed tools, arguments valid JSON objects, and
// finish reason tool_calls.
func TestForcedToolCalls(t *testing.T) {
	r := newDemoRunner(t, Config{})
	tools := []*chattemplate.Object{
		functionTool("get_weather", `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`),
		functionTool("now", ``),
	}
	tests := []struct {
		name     string
		choice   engine.ToolChoice
		allowed  []string
		maxCalls int
	}{
		{"required", engine.ToolChoice{Mode: engine.ToolRequired}, []string{"get_weather", "now"}, 8},
		{"required, one call", engine.ToolChoice{Mode: engine.ToolRequired, NoParallel: true}, []string{"get_weather", "now"}, 1},
		{"named", engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather", NoParallel: true}, []string{"get_weather"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkForced(t, r, "demo", tools, tc.choice, tc.allowed, tc.maxCalls, 4) })
	}

	bad := []struct {
		name   string
		tools  []*chattemplate.Object
		choice engine.ToolChoice
		want   string
	}{
		{"unknown name", tools, engine.ToolChoice{Mode: engine.ToolNamed, Name: "nope"}, "nope"},
		{"no tools", nil, engine.ToolChoice{Mode: engine.ToolRequired}, "declares no tools"},
		{"unenforceable", []*chattemplate.Object{functionTool("f", `{"type":"object","properties":{"s":{"type":"string","contentEncoding":"base64"}}}`)}, engine.ToolChoice{Mode: engine.ToolRequired}, "contentEncoding"},
		{"not an object", []*chattemplate.Object{functionTool("f", `{"type":"string"}`)}, engine.ToolChoice{Mode: engine.ToolRequired}, "object"},
	}
	for _, tc := range bad {
		req := chat("demo", "x", 10)
		req.Tools, req.ToolChoice = tc.tools, tc.choice
		var ire *prompt.InvalidRequestError
		if _, err := r.Generate(context.Background(), req); !errors.As(err, &ire) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a 400 naming %q", tc.name, err, tc.want)
		}
	}
}

// checkForced runs forced tool choices on model with seeds 0..runs-1 at
// temperature 1: each must end in tool_calls with 1..maxCalls calls of
// the allowed tools, arguments valid JSON objects (get_weather's city a
// string of at most 10 runes), and no content.
func checkForced(t *testing.T, r *Runner, model string, tools []*chattemplate.Object, choice engine.ToolChoice, allowed []string, maxCalls, runs int) {
	t.Helper()
	for i := range runs {
		req := chat(model, "What is the weather?", 300)
		seed := int64(i)
		req.Sampling.Temperature, req.Sampling.Seed = 1, &seed
		req.Tools, req.ToolChoice = tools, choice
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var calls []engine.ToolCall
		var text string
		var final engine.Event
		for ev := range ch {
			calls = append(calls, ev.ToolCalls...)
			text += ev.Text
			final = ev
		}
		if final.Err != nil || final.FinishReason != engine.FinishToolCalls || text != "" {
			t.Fatalf("run %d: finish %q, err %v, content %q; want tool_calls and no content", i, final.FinishReason, final.Err, text)
		}
		if len(calls) == 0 || len(calls) > maxCalls {
			t.Fatalf("run %d: %d calls, want 1..%d", i, len(calls), maxCalls)
		}
		for _, c := range calls {
			var args map[string]any
			if !slices.Contains(allowed, c.Name) || c.Undeclared || json.Unmarshal([]byte(c.Arguments), &args) != nil {
				t.Fatalf("run %d: call %+v", i, c)
			}
			if c.Name == "get_weather" {
				if city, ok := args["city"].(string); !ok || len([]rune(city)) > 10 {
					t.Fatalf("run %d: arguments %s", i, c.Arguments)
				}
			}
		}
	}
}

// TestForcedToolCallsWithoutCallFormat: a model whose template has no
// tool-call format (parser none, as Gemma 3's) still answers a forced
// tool choice, as one bare JSON call read by the llama3_json parser; a
// model with reasoning but no call format (parser think) refuses it with
// a 400, and tool_choice auto leaves either one's text as content.
func TestForcedToolCallsWithoutCallFormat(t *testing.T) {
	for _, tc := range []struct {
		family string
		req    *engine.Request
		want   string
	}{
		{parser.None, &engine.Request{Messages: []*chattemplate.Object{}, ToolChoice: engine.ToolChoice{Mode: engine.ToolRequired}}, parser.Llama3JSON},
		{parser.None, &engine.Request{Messages: []*chattemplate.Object{}, ToolChoice: engine.ToolChoice{Mode: engine.ToolNamed, Name: "f"}}, parser.Llama3JSON},
		{parser.None, &engine.Request{Messages: []*chattemplate.Object{}}, parser.None},
		{parser.None, &engine.Request{ToolChoice: engine.ToolChoice{Mode: engine.ToolRequired}}, parser.None}, // raw prompt
		{parser.Think, &engine.Request{Messages: []*chattemplate.Object{}, ToolChoice: engine.ToolChoice{Mode: engine.ToolRequired}}, parser.Think},
		{parser.Qwen3, &engine.Request{Messages: []*chattemplate.Object{}, ToolChoice: engine.ToolChoice{Mode: engine.ToolRequired}}, parser.Qwen3},
	} {
		if got := callFamily(tc.family, tc.req); got != tc.want {
			t.Errorf("callFamily(%s, %+v) = %s, want %s", tc.family, tc.req.ToolChoice, got, tc.want)
		}
	}

	r := newDemoRunner(t, Config{Models: map[string]ModelSettings{"demo": {Parser: parser.None}, "demo-gguf": {Parser: parser.Think}}})
	tools := []*chattemplate.Object{
		functionTool("get_weather", `{"type":"object","properties":{"city":{"type":"string","maxLength":10}},"required":["city"],"additionalProperties":false}`),
		functionTool("now", ``),
	}
	checkForced(t, r, "demo", tools, engine.ToolChoice{Mode: engine.ToolRequired}, []string{"get_weather", "now"}, 1, 2)
	checkForced(t, r, "demo", tools, engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather"}, []string{"get_weather"}, 1, 2)
	req := chat("demo-gguf", "x", 10)
	req.Tools, req.ToolChoice = tools, engine.ToolChoice{Mode: engine.ToolRequired}
	var ire *prompt.InvalidRequestError
	if _, err := r.Generate(context.Background(), req); !errors.As(err, &ire) || !strings.Contains(err.Error(), "cannot be forced") {
		t.Errorf("parser think, tool_choice required: %v, want a 400 saying it cannot be forced", err)
	}
}

// TestToolChoiceNone: with tool_choice none, call-shaped text is content
// (reasoning is still split off).
func TestToolChoiceNone(t *testing.T) {
	req := chat("demo", "x", 10)
	req.ToolChoice = engine.ToolChoice{Mode: engine.ToolNone}
	for _, family := range []string{"qwen3", "hermes", "llama3_json", "mistral"} {
		p, err := newOutputParser(family, req, "")
		if err != nil {
			t.Fatal(err)
		}
		text := "<think>hm</think>" + `<tool_call>{"name":"f","arguments":{}}</tool_call>[TOOL_CALLS][{"name":"f","arguments":{}}]`
		out := p.Add(text)
		rest, _ := p.Finish()
		content, calls := out.Content+rest.Content, len(out.Calls)+len(rest.Calls)
		if calls != 0 || !strings.Contains(content, `<tool_call>{"name":"f"`) || !strings.Contains(content, "[TOOL_CALLS]") {
			t.Errorf("%s: %d calls, content %q", family, calls, content)
		}
		if strings.HasPrefix(family, "qwen3") && strings.Contains(content, "<think>") {
			t.Errorf("%s: reasoning left in content %q", family, content)
		}
	}
}
