package runner

import (
	"errors"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/parser"
	"fusion/engine/prompt"
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
	all, final := feedOutput(out, []string{"<th", "ink>\nNeed ", "data.\n</thi", "nk>\n\nChecking.", "\n<tool_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}\n</tool_", "call>"})
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
	g := &generation{out: raw}
	ev := g.finish(engine.Event{Done: true, FinishReason: engine.FinishStop}, "<think>a</think>b")
	if ev.Text != "<think>a</think>b" || ev.Reasoning != "" || ev.FinishReason != engine.FinishStop {
		t.Errorf("raw prompt output %+v", ev)
	}
}

// feedOutput runs pieces of model text through the generation loop's
// parse/finish steps and returns everything they produced and the final
// event.
func feedOutput(out parser.Parser, pieces []string) (all, final engine.Event) {
	g := &generation{out: out}
	for _, piece := range pieces {
		var ev engine.Event
		g.parse(&ev, g.out.Add(piece))
		all.Text += ev.Text
		all.Reasoning += ev.Reasoning
		all.ToolCalls = append(all.ToolCalls, ev.ToolCalls...)
	}
	final = g.finish(engine.Event{Done: true, FinishReason: engine.FinishStop}, "")
	all.Text += final.Text
	all.ToolCalls = append(all.ToolCalls, final.ToolCalls...)
	return all, final
}

// TestOutputParsingGemma4: Gemma 4's thought channel is reasoning and its
// calls are tool calls; with tool_choice none the channel is still split
// off and call-like text stays text.
func TestOutputParsingGemma4(t *testing.T) {
	tools := []*chattemplate.Object{chattemplate.NewObject("type", "function",
		"function", chattemplate.NewObject("name", "get_weather"))}
	msgs := []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", "weather?")}
	pieces := []string{"<|channel>", "thought\nNeed ", "data.<channel|>", "Checking.", "<|tool_call>", "call:get_weather{city:<|\"|>", "Paris<|\"|>}", "<tool_call|>"}
	for _, c := range []struct {
		choice              engine.ToolChoice
		reasoning, text     string
		calls               int
		wantToolCallsFinish bool
	}{
		{engine.ToolChoice{}, "Need data.", "Checking.", 1, true},
		{engine.ToolChoice{Mode: engine.ToolNone}, "Need data.", "Checking.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", 0, false},
	} {
		out, err := newOutputParser("gemma4", &engine.Request{Messages: msgs, Tools: tools, ToolChoice: c.choice}, "<|turn>model\n")
		if err != nil {
			t.Fatal(err)
		}
		all, final := feedOutput(out, pieces)
		if all.Reasoning != c.reasoning || all.Text != c.text || len(all.ToolCalls) != c.calls {
			t.Errorf("%+v: reasoning %q, text %q, calls %+v", c.choice, all.Reasoning, all.Text, all.ToolCalls)
		}
		if c.calls > 0 && all.ToolCalls[0].Arguments != `{"city":"Paris"}` {
			t.Errorf("arguments %s", all.ToolCalls[0].Arguments)
		}
		if (final.FinishReason == engine.FinishToolCalls) != c.wantToolCallsFinish {
			t.Errorf("%+v: finish reason %q", c.choice, final.FinishReason)
		}
	}
}

// TestForcedGemma4: Gemma 4's calls can be forced (required, named);
// gemma4_think, Gemma 4's channel without calls, forces and reads them
// as gemma4; a schema the notation cannot carry is still a 400 naming it.
func TestForcedGemma4(t *testing.T) {
	tools := []*chattemplate.Object{functionTool("get_weather", `{"type":"object","properties":{"city":{"type":"string"}}}`)}
	for _, choice := range []engine.ToolChoice{{Mode: engine.ToolRequired}, {Mode: engine.ToolNamed, Name: "get_weather"}} {
		g, err := toolCallGrammar(callFamily(parser.Gemma4Think, &engine.Request{Messages: []*chattemplate.Object{}, ToolChoice: choice}), tools, choice, 3)
		if err != nil {
			t.Fatalf("%+v: %v", choice, err)
		}
		m := g.NewMatcher()
		if _, ok := m.AdvanceBytes([]byte(`<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>`)); !ok || !m.Done() {
			t.Errorf("%+v: the template's own call is refused", choice)
		}
	}
	bad := []*chattemplate.Object{functionTool("f", `{"type":"object","properties":{"a<|\"|>b":{"type":"string"}}}`)}
	_, err := toolCallGrammar(parser.Gemma4, bad, engine.ToolChoice{Mode: engine.ToolRequired}, 3)
	var invalid *prompt.InvalidRequestError
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), "Gemma 4") {
		t.Errorf("a key with the delimiter: %v, want an InvalidRequestError naming Gemma 4's notation", err)
	}
}
