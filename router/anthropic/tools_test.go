package anthropic

import (
	"strings"
	"testing"

	"fusion/engine"
)

// TestEngineEventsBlocks feeds engine events as the runner delivers them
// (reasoning, then text, then two complete tool calls) through the stream
// converter and the accumulator.
func TestEngineEventsBlocks(t *testing.T) {
	events := []engine.Event{
		{Reasoning: "Let me"},
		{Reasoning: " think."},
		{Text: "Checking."},
		{ToolCalls: []engine.ToolCall{{Index: 0, ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris","days":[1,2]}`}}},
		{ToolCalls: []engine.ToolCall{{Index: 1, ID: "call_b", Name: "noop", Arguments: `{}`}},
			Done: true, FinishReason: engine.FinishToolCalls, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 9}},
	}
	c := newStreamConverter("msg_1", "demo", 3, testSigner)
	a := newAccumulator("msg_1", "demo", testSigner)
	evs := c.start(engine.Event{})
	for _, ev := range events {
		evs = append(evs, c.event(ev)...)
		a.add(ev)
	}
	want := []string{
		`message_start {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"demo","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`,
		`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		`ping {"type":"ping"}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me"}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" think."}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"` + testCodec.sign("demo", "Let me think.") + `"}}`,
		`content_block_stop {"type":"content_block_stop","index":0}`,
		`content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}`,
		`content_block_stop {"type":"content_block_stop","index":1}`,
		`content_block_start {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_weather","input":{}}}`,
		`content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Paris\",\"days\":[1,2]}"}}`,
		`content_block_stop {"type":"content_block_stop","index":2}`,
		`content_block_start {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_b","name":"noop","input":{}}}`,
		`content_block_delta {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
		`content_block_stop {"type":"content_block_stop","index":3}`,
		`message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":3,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		`message_stop {"type":"message_stop"}`,
	}
	if got := eventLines(t, evs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantMsg := `{"id":"msg_1","type":"message","role":"assistant","model":"demo","content":[` +
		`{"type":"thinking","thinking":"Let me think.","signature":"` + testCodec.sign("demo", "Let me think.") + `"},{"type":"text","text":"Checking."},` +
		`{"type":"tool_use","id":"toolu_a","name":"get_weather","input":{"city":"Paris","days":[1,2]}},{"type":"tool_use","id":"toolu_b","name":"noop","input":{}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`
	if got := toJSON(t, a.result()); got != wantMsg {
		t.Errorf("message\n got %s\nwant %s", got, wantMsg)
	}
}

// TestEngineStopReasons: FinishToolCalls is tool_use, also for a call-less
// final event; a length stop after calls stays max_tokens.
func TestEngineStopReasons(t *testing.T) {
	tests := []struct {
		events []engine.Event
		want   string
	}{
		{[]engine.Event{{Done: true, FinishReason: engine.FinishToolCalls}}, "tool_use"},
		{[]engine.Event{{ToolCalls: []engine.ToolCall{{ID: "call_x", Name: "f", Arguments: "{}"}}}, {Done: true, FinishReason: engine.FinishLength}}, "max_tokens"},
		{[]engine.Event{{Reasoning: "r"}, {Done: true, FinishReason: engine.FinishStop}}, "end_turn"},
	}
	for i, tt := range tests {
		a := newAccumulator("msg_1", "demo", testSigner)
		for _, ev := range tt.events {
			a.add(ev)
		}
		if m := a.result(); m.StopReason == nil || *m.StopReason != tt.want {
			t.Errorf("case %d: stop_reason %v, want %s", i, m.StopReason, tt.want)
		}
	}
}
