package runner

import (
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
)

// TestOutputParsing feeds model text through the same parse/finish steps
// the generation loop uses: reasoning, answer and a tool call come out as
// separate event fields, and finishing after a call says "tool_calls".
func TestOutputParsing(t *testing.T) {
	req := &engine.Request{
		Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", "weather?")},
		Tools: []*chattemplate.Object{chattemplate.NewObject("type", "function",
			"function", chattemplate.NewObject("name", "get_weather"))},
	}
	out, err := newOutputParser("qwen3", req, "<|im_start|>assistant\n")
	if err != nil {
		t.Fatal(err)
	}
	g := &generation{out: out}
	var all engine.Event
	for _, piece := range []string{"<th", "ink>\nNeed ", "data.\n</thi", "nk>\n\nChecking.", "\n<tool_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}\n</tool_", "call>"} {
		var ev engine.Event
		g.parse(&ev, g.out.Add(piece))
		all.Text += ev.Text
		all.Reasoning += ev.Reasoning
		all.ToolCalls = append(all.ToolCalls, ev.ToolCalls...)
	}
	final := g.finish(engine.Event{Done: true, FinishReason: engine.FinishStop}, "")
	all.Text += final.Text
	all.ToolCalls = append(all.ToolCalls, final.ToolCalls...)
	if all.Reasoning != "Need data." || all.Text != "Checking." {
		t.Errorf("reasoning %q, text %q", all.Reasoning, all.Text)
	}
	if len(all.ToolCalls) != 1 || all.ToolCalls[0].Name != "get_weather" || all.ToolCalls[0].Arguments != `{"city":"Paris"}` || all.ToolCalls[0].Undeclared {
		t.Fatalf("tool calls %+v", all.ToolCalls)
	}
	if final.FinishReason != engine.FinishToolCalls {
		t.Errorf("finish reason %q, want tool_calls", final.FinishReason)
	}

	// Raw prompts are not parsed: tags stay in the text.
	raw, err := newOutputParser("qwen3", &engine.Request{Prompt: ptr("x")}, "")
	if err != nil {
		t.Fatal(err)
	}
	g = &generation{out: raw}
	ev := g.finish(engine.Event{Done: true, FinishReason: engine.FinishStop}, "<think>a</think>b")
	if ev.Text != "<think>a</think>b" || ev.Reasoning != "" || ev.FinishReason != engine.FinishStop {
		t.Errorf("raw prompt output %+v", ev)
	}
}
