package anthropic

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/prompt"
	"fusion/router/wire"
)

func mustPlan(t *testing.T, body string) *plan {
	t.Helper()
	var req MessagesRequest
	if e := decodeJSON([]byte(body), &req); e != nil {
		t.Fatalf("decode: %v", e)
	}
	p, e := req.toPlan(Options{MaxTokens: 100}, "msg_test", testCodec, nil)
	if e != nil {
		t.Fatalf("toPlan: %v", e)
	}
	return p
}

func planErr(body string) *Error {
	var req MessagesRequest
	if e := decodeJSON([]byte(body), &req); e != nil {
		return e
	}
	_, e := req.toPlan(Options{}, "msg_test", testCodec, nil)
	return e
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConvertRequest(t *testing.T) {
	tests := []struct {
		name, body string
		messages   string // the engine request's messages as JSON
		tools      string
	}{
		{
			name:     "string content and system string",
			body:     `{"model":"m","max_tokens":5,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`,
			messages: `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]`,
			tools:    `null`,
		},
		{
			name: "system blocks with cache_control, text blocks joined",
			body: `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}],
				"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"text","text":"y","cache_control":{"type":"ephemeral"}}]}]}`,
			messages: `[{"role":"system","content":"a\nb"},{"role":"user","content":"x\ny"}]`,
			tools:    `null`,
		},
		{
			name: "tool_use and tool_result history, signed thinking and sealed redacted_thinking kept",
			body: `{"model":"m","max_tokens":5,
				"tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
				"tool_choice":{"type":"auto","disable_parallel_tool_use":true},
				"messages":[
				{"role":"user","content":"weather?"},
				{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"` + testCodec.sign("m", "hmm") + `"},
					{"type":"redacted_thinking","data":"` + testCodec.seal("m", "hidden") + `"},
					{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris","units":"c"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},
					{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"boom"}],"is_error":true},
					{"type":"text","text":"thanks"}]}]}`,
			messages: `[{"role":"user","content":"weather?"},` +
				`{"role":"assistant","content":"Checking.","reasoning_content":"hmm\nhidden","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","units":"c"}}}]},` +
				`{"role":"tool","tool_call_id":"toolu_1","content":"sunny"},` +
				`{"role":"tool","tool_call_id":"toolu_2","content":"Error: boom"},` +
				`{"role":"user","content":"thanks"}]`,
			tools: `[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`,
		},
		{
			name: "consecutive same-role turns are one turn",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]},
				{"role":"assistant","content":"c"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"r"}]},{"role":"user","content":"d"}]}`,
			messages: `[{"role":"user","content":"a\nb"},` +
				`{"role":"assistant","content":"c","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"f","arguments":{}}}]},` +
				`{"role":"tool","tool_call_id":"toolu_1","content":"r"},{"role":"user","content":"d"}]`,
			tools: `null`,
		},
		{
			name:     "an empty final assistant message is no prefill",
			body:     `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""}]}`,
			messages: `[{"role":"user","content":"hi"}]`,
			tools:    `null`,
		},
		{
			// Current Claude Code sends its environment as a system entry
			// after the first user turn, with text blocks.
			name: "system entries stay system messages where they stand",
			body: `{"model":"m","max_tokens":5,"system":"top","messages":[{"role":"user","content":"a"},
				{"role":"system","content":[{"type":"text","text":"env","cache_control":{"type":"ephemeral"}},{"type":"text","text":"more"}]},
				{"role":"user","content":"b"},{"role":"assistant","content":"c"},{"role":"system","content":"late"},{"role":"user","content":"d"}]}`,
			messages: `[{"role":"system","content":"top"},{"role":"user","content":"a"},{"role":"system","content":"env\nmore"},` +
				`{"role":"user","content":"b"},{"role":"assistant","content":"c"},{"role":"system","content":"late"},{"role":"user","content":"d"}]`,
			tools: `null`,
		},
		{
			name:     "tool_choice none drops the tools",
			body:     `{"model":"m","max_tokens":5,"tools":[{"name":"t","input_schema":{"type":"object"}}],"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"hi"}]}`,
			messages: `[{"role":"user","content":"hi"}]`,
			tools:    `null`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPlan(t, tt.body)
			if got := toJSON(t, p.req.Messages); got != tt.messages {
				t.Errorf("messages\n got %s\nwant %s", got, tt.messages)
			}
			if got := toJSON(t, p.req.Tools); got != tt.tools {
				t.Errorf("tools\n got %s\nwant %s", got, tt.tools)
			}
		})
	}
}

// TestPrefillAndBudget: a final assistant message is continued, and
// budget_tokens reaches the engine.
func TestPrefillAndBudget(t *testing.T) {
	p := mustPlan(t, `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1500},
		"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"The answer is"}]}`)
	if !p.req.ContinueFinal || p.req.ReasoningBudget != 1500 || !p.req.StartThinking {
		t.Errorf("ContinueFinal %v, ReasoningBudget %d, StartThinking %v", p.req.ContinueFinal, p.req.ReasoningBudget, p.req.StartThinking)
	}
	p = mustPlan(t, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if p.req.ContinueFinal || p.req.ReasoningBudget != 0 || p.req.StartThinking {
		t.Errorf("ContinueFinal %v, ReasoningBudget %d, StartThinking %v", p.req.ContinueFinal, p.req.ReasoningBudget, p.req.StartThinking)
	}
	// adaptive lets the model choose; count_tokens renders what messages does.
	p = mustPlan(t, `{"model":"m","max_tokens":5,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"hi"}]}`)
	if p.req.StartThinking || p.req.EnableThinking == nil || !*p.req.EnableThinking {
		t.Errorf("adaptive: StartThinking %v, EnableThinking %v", p.req.StartThinking, p.req.EnableThinking)
	}
	var count MessagesRequest
	if e := decodeJSON([]byte(`{"model":"m","thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`), &count); e != nil {
		t.Fatal(e)
	}
	if r, _, e := count.prompt("", testCodec, nil); e != nil || !r.PromptRequest().StartThinking {
		t.Errorf("count_tokens prompt: %+v, %v", r, e)
	}
	for body, want := range map[string]string{
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x "}]}`:                                                 "trailing whitespace",
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`: "tool_result",
	} {
		if e := planErr(body); e == nil || e.Status != 400 || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %v, want a 400 mentioning %q", body, e, want)
		}
	}
}

func TestConvertParams(t *testing.T) {
	p := mustPlan(t, `{"model":"m","max_tokens":2000,"stream":true,"temperature":0.5,"top_p":0.9,"top_k":40,
		"stop_sequences":["END",""],"metadata":{"user_id":"u"},"thinking":{"type":"enabled","budget_tokens":1024},
		"messages":[{"role":"user","content":"hi"}]}`)
	r := p.req
	if !p.stream || r.MaxTokens != 100 || r.Sampling.Temperature != 0.5 || r.Sampling.TopP != 0.9 || r.Sampling.TopK != 40 ||
		len(r.Stop) != 1 || r.Stop[0] != "END" || r.EnableThinking == nil || !*r.EnableThinking || r.Model != "m" || r.ID != "msg_test" {
		t.Errorf("unexpected request: %+v", r)
	}
	p = mustPlan(t, `{"model":"m","max_tokens":5,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"hi"}]}`)
	if p.stream || p.req.EnableThinking == nil || *p.req.EnableThinking || p.req.MaxTokens != 5 {
		t.Errorf("unexpected request: %+v", p.req)
	}
}

func TestConvertErrors(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct{ body, want string }{
		{`{"model":"m",` + msgs + `}`, "max_tokens: Field required"},
		{`{"max_tokens":5,` + msgs + `}`, "model: Field required"},
		{`{"model":"m","max_tokens":5}`, "messages: Field required"},
		{`{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens"},
		{`{"model":"m","max_tokens":"5",` + msgs + `}`, "max_tokens: Input should be a valid integer"},
		{`{"model":"m","max_tokens":5,"temperature":1.5,` + msgs + `}`, "temperature"},
		{`{"model":"m","max_tokens":5,"top_k":-1,` + msgs + `}`, "top_k"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"developer","content":"x"}]}`, "messages.0.role: Input should be 'user', 'assistant' or 'system'"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system"}]}`, "messages.1.content: Field required"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"image"}]}]}`, "messages.1.content.0.type: Input should be 'text'"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":7}]}`, "messages.1.content: Input should be a valid string or a list of text blocks"},
		{`{"model":"m","max_tokens":5,"context_management":[],` + msgs + `}`, "context_management: Input should be a valid dictionary"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user"}]}`, "messages.0.content: Field required"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, "take text only"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"http://x/y.png"}}]}]}`, "take text only"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"b","input":"x"}]}]}`, "messages.0.content.0.input"},
		{`{"model":"m","max_tokens":5,"tools":[{"name":"t"}],` + msgs + `}`, "tools.0.input_schema: Field required"},
		{`{"model":"m","max_tokens":5,"tool_choice":{"type":"any"},` + msgs + `}`, "requires 'tools'"},
		{`{"model":"m","max_tokens":5,"tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"any","disable_parallel_tool_use":1},` + msgs + `}`, "disable_parallel_tool_use"},
		{`{"model":"m","max_tokens":5,"tools":[{"name":"t","input_schema":{}}],"tool_choice":{"type":"tool","name":"u"},` + msgs + `}`, "no tool named"},
		{`{"model":"m","max_tokens":5,"tool_choice":{"type":"sometimes"},` + msgs + `}`, "tool_choice.type"},
		{`{"model":"m","max_tokens":5,"tool_choice":"auto",` + msgs + `}`, "tool_choice: Input should be a valid dictionary"},
		{`{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":10},` + msgs + `}`, "budget_tokens"},
		{`{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":6000},` + msgs + `}`, "max_tokens"},
		{`{"model":"m","max_tokens":5,"stop_sequences":"x",` + msgs + `}`, "stop_sequences"},
		{`{"model":"m","max_tokens":5,"metadata":[],` + msgs + `}`, "metadata"},
		{`{"model":"m","max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, "system.0.type"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_object"}},` + msgs + `}`, "output_config.format.type: Input should be 'json_schema'"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_schema"}},` + msgs + `}`, "output_config.format.schema: Field required"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_schema","schema":[]}},` + msgs + `}`, "output_config.format.schema: Input should be a valid dictionary, but got an array"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"schema":{}}},` + msgs + `}`, "output_config.format.type: Field required"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":7},` + msgs + `}`, "output_config.format: Input should be a valid dictionary"},
		{`{"model":"m","max_tokens":5,"output_config":[],` + msgs + `}`, "output_config: Input should be a valid dictionary"},
		{`{"model":"m","max_tokens":5,"output_format":{"type":"json_schema","schema":true},` + msgs + `}`, "output_format.schema: Input should be a valid dictionary"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_schema","schema":{}}},"output_format":{"type":"json_schema","schema":{}},` + msgs + `}`, "Both output_format and output_config.format"},
		{`{"model":"m","max_tokens":5,"output_format":{"type":"json_schema","schema":{}},"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"{"}]}`, "output_format: structured output is incompatible with a prefilled"},
		{`{"model":"m","max_tokens":5,"tools":[{"name":"t","strict":1,"input_schema":{}}],` + msgs + `}`, "tools.0.strict: Input should be a valid boolean"},
		{`[]`, "must be a JSON object"},
		{`{"model":`, "not valid JSON"},
	}
	for _, tt := range tests {
		e := planErr(tt.body)
		if e == nil || e.Status != 400 || e.Type != TypeInvalidRequest || !strings.Contains(e.Message, tt.want) {
			t.Errorf("%s: got %v, want a 400 mentioning %q", tt.body, e, tt.want)
		}
	}
}

func TestStopReason(t *testing.T) {
	tests := []struct {
		ev     engine.Event
		tools  bool
		reason string
		seq    string
	}{
		{engine.Event{Done: true, FinishReason: engine.FinishStop}, false, "end_turn", ""},
		{engine.Event{Done: true, FinishReason: engine.FinishLength}, false, "max_tokens", ""},
		{engine.Event{Done: true, FinishReason: engine.FinishStop, StopSequence: "END"}, false, "stop_sequence", "END"},
		{engine.Event{Done: true, FinishReason: engine.FinishStop}, true, "tool_use", ""},
		{engine.Event{Done: true, FinishReason: engine.FinishLength}, true, "max_tokens", ""},
		{engine.Event{Done: true, FinishReason: engine.FinishContextWindow}, false, "model_context_window_exceeded", ""},
		{engine.Event{Done: true, FinishReason: engine.FinishContextWindow}, true, "model_context_window_exceeded", ""},
	}
	for _, tt := range tests {
		r, s := stopReason(tt.ev, tt.tools)
		if r != tt.reason || (s == nil) != (tt.seq == "") || (s != nil && *s != tt.seq) {
			t.Errorf("%+v: got %s %v", tt.ev, r, s)
		}
	}
}

func TestStreamEvents(t *testing.T) {
	c := newStreamConverter("msg_1", "demo", 12, testSigner)
	var got []string
	add := func(evs []event) {
		for _, e := range evs {
			b := toJSON(t, e.data)
			var typed struct{ Type string }
			_ = json.Unmarshal([]byte(b), &typed)
			if typed.Type != e.name {
				t.Errorf("event %s has type %q", e.name, typed.Type)
			}
			got = append(got, e.name+" "+b)
		}
	}
	add(c.start(engine.Event{}))
	add(c.event(engine.Event{Text: "Hel", Tokens: make([]engine.TokenLogprob, 1)}))
	add(c.event(engine.Event{Text: "lo"}))
	add(c.event(engine.Event{Done: true, FinishReason: engine.FinishStop, StopSequence: "END",
		Usage: engine.Usage{PromptTokens: 12, CompletionTokens: 3, CachedTokens: 4, CacheWriteTokens: 2}}))
	want := []string{
		`message_start {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"demo","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`,
		`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`ping {"type":"ping"}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}`,
		`content_block_stop {"type":"content_block_stop","index":0}`,
		`message_delta {"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"input_tokens":6,"output_tokens":3,"cache_creation_input_tokens":2,"cache_read_input_tokens":4}}`,
		`message_stop {"type":"message_stop"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAccumulator(t *testing.T) {
	a := newAccumulator("msg_1", "demo", testSigner)
	a.add(engine.Event{Text: "Hi"})
	a.add(engine.Event{Text: " there", Done: true, FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 2}})
	want := `{"id":"msg_1","type":"message","role":"assistant","model":"demo","content":[{"type":"text","text":"Hi there"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`
	if got := toJSON(t, a.result()); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestErrorBody(t *testing.T) {
	e := FromEngine(engine.ErrOverloaded)
	if e.Status != 429 || e.Type != TypeRateLimit || e.RetryAfter != 1 {
		t.Errorf("overloaded: %+v", e)
	}
	if e := FromEngine(engine.ErrUnavailable); e.Status != 529 || e.Type != TypeOverloaded {
		t.Errorf("unavailable: %+v", e)
	}
	if e := engineError(engine.ErrModelNotFound, "x"); e.Status != 404 || e.Type != TypeNotFound {
		t.Errorf("not found: %+v", e)
	}
	if got := toJSON(t, Unauthorized("no").body()); got != `{"type":"error","error":{"type":"authentication_error","message":"no"}}` {
		t.Errorf("body: %s", got)
	}
}

// eventLines renders events as "name data" lines, checking each data's
// type against its name.
func eventLines(t *testing.T, evs []event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		b := toJSON(t, e.data)
		var typed struct{ Type string }
		_ = json.Unmarshal([]byte(b), &typed)
		if typed.Type != e.name {
			t.Errorf("event %s has type %q", e.name, typed.Type)
		}
		out = append(out, e.name+" "+b)
	}
	return out
}

// TestStreamBlocks drives the block machine with parsed output: thinking,
// text, two tool calls, as the output parsers will deliver them.
func TestStreamBlocks(t *testing.T) {
	c := newStreamConverter("msg_1", "demo", 3, testSigner)
	a := newAccumulator("msg_1", "demo", testSigner)
	steps := []output{
		{Reasoning: "Let me"}, {Reasoning: " think."},
		{Content: "Checking."},
		{Calls: []callDelta{{Index: 0, ID: "call_a", Name: "get_weather"}, {Index: 0, ArgumentFragment: `{"city":`}}},
		{Calls: []callDelta{{Index: 0, ArgumentFragment: `"Paris"}`}, {Index: 1, ID: "call_b", Name: "noop"}}},
	}
	var evs []event
	evs = append(evs, c.start(engine.Event{})...)
	for _, o := range steps {
		evs = append(evs, c.output(o, engine.Event{})...)
		a.output(o, engine.Event{})
	}
	done := engine.Event{Done: true, FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 9}}
	evs = append(evs, c.output(output{}, done)...)
	a.output(output{}, done)
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
		`content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`,
		`content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`,
		`content_block_stop {"type":"content_block_stop","index":2}`,
		`content_block_start {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_b","name":"noop","input":{}}}`,
		`content_block_stop {"type":"content_block_stop","index":3}`,
		`message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":3,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		`message_stop {"type":"message_stop"}`,
	}
	if got := eventLines(t, evs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events\n got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantMsg := `{"id":"msg_1","type":"message","role":"assistant","model":"demo","content":[` +
		`{"type":"thinking","thinking":"Let me think.","signature":"` + testCodec.sign("demo", "Let me think.") + `"},{"type":"text","text":"Checking."},` +
		`{"type":"tool_use","id":"toolu_a","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"toolu_b","name":"noop","input":{}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`
	if got := toJSON(t, a.result()); got != wantMsg {
		t.Errorf("message\n got %s\nwant %s", got, wantMsg)
	}
}

// TestStreamEmpty: a generation with no text still has one (empty) text
// block, streamed or not.
func TestStreamEmpty(t *testing.T) {
	c := newStreamConverter("msg_1", "demo", 3, testSigner)
	evs := append(c.start(engine.Event{}), c.event(engine.Event{Done: true, FinishReason: engine.FinishStop})...)
	var names []string
	for _, e := range evs {
		names = append(names, e.name)
	}
	if got := strings.Join(names, " "); got != "message_start content_block_start ping content_block_stop message_delta message_stop" {
		t.Errorf("events: %s", got)
	}
	a := newAccumulator("msg_1", "demo", testSigner)
	a.add(engine.Event{Done: true, FinishReason: engine.FinishStop})
	if got := toJSON(t, a.result().Content); got != `[{"type":"text","text":""}]` {
		t.Errorf("content: %s", got)
	}
}

// TestToolChoiceToEngine: any, tool and disable_parallel_tool_use reach
// the engine request; none hides the tools.
func TestToolChoiceToEngine(t *testing.T) {
	const tools = `"tools":[{"name":"t","input_schema":{"type":"object"}}],`
	tests := []struct {
		choice string
		want   engine.ToolChoice
		tools  bool
	}{
		{`{"type":"auto"}`, engine.ToolChoice{}, true},
		{`{"type":"any"}`, engine.ToolChoice{Mode: engine.ToolRequired}, true},
		{`{"type":"any","disable_parallel_tool_use":true}`, engine.ToolChoice{Mode: engine.ToolRequired, NoParallel: true}, true},
		{`{"type":"tool","name":"t"}`, engine.ToolChoice{Mode: engine.ToolNamed, Name: "t"}, true},
		{`{"type":"none"}`, engine.ToolChoice{Mode: engine.ToolNone}, false},
	}
	for _, tt := range tests {
		p := mustPlan(t, `{"model":"m","max_tokens":5,`+tools+`"tool_choice":`+tt.choice+`,"messages":[{"role":"user","content":"hi"}]}`)
		if p.req.ToolChoice != tt.want || (p.req.Tools != nil) != tt.tools {
			t.Errorf("%s: %+v (tools %v), want %+v", tt.choice, p.req.ToolChoice, p.req.Tools != nil, tt.want)
		}
	}
}

// TestClaudeCodeFields: every field Claude Code 2.1.x sends (recorded from
// the real client) is accepted, and max_tokens passes unclamped when the
// node has no cap of its own.
func TestClaudeCodeFields(t *testing.T) {
	var req MessagesRequest
	body := `{"model":"m","max_tokens":32000,"stream":true,
		"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328"},{"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>r</system-reminder>"},{"type":"text","text":"Say hi"}]},
			{"role":"system","content":[{"type":"text","text":"# Environment"}]}],
		"tools":[{"name":"Bash","description":"Run","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}},
			{"name":"Deferred","description":"d","input_schema":{"type":"object"},"defer_loading":true}],
		"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s\"}"},
		"thinking":{"type":"adaptive","display":"omitted"},
		"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
		"output_config":{"effort":"high"}}`
	if e := decodeJSON([]byte(body), &req); e != nil {
		t.Fatal(e)
	}
	p, e := req.toPlan(Options{}, "msg_cc", testCodec, nil)
	if e != nil {
		t.Fatalf("toPlan: %v", e)
	}
	r := p.req
	if !p.stream || r.MaxTokens != 32000 || r.EnableThinking == nil || !*r.EnableThinking || len(r.Tools) != 2 {
		t.Errorf("unexpected request: stream %v max_tokens %d thinking %v tools %d", p.stream, r.MaxTokens, r.EnableThinking, len(r.Tools))
	}
	if got, want := toJSON(t, r.Messages), `[{"role":"system","content":"x-anthropic-billing-header: cc_version=2.1.328\nYou are an agent."},`+
		`{"role":"user","content":"<system-reminder>r</system-reminder>\nSay hi"},{"role":"system","content":"# Environment"}]`; got != want {
		t.Errorf("messages\n got %s\nwant %s", got, want)
	}
}

// TestOutputFormatToEngine: output_config.format and the beta's
// output_format become the engine's response format with the schema as
// sent (its key order is the grammar's property order); effort alone,
// null formats and strict tools ask for none.
func TestOutputFormatToEngine(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	const schema = `{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}},"required":["z","a"]}`
	tests := []struct {
		name, fields string
		want         string // the engine's schema ("": no response format)
		param        string
	}{
		{"output_config.format", `"output_config":{"effort":"low","format":{"type":"json_schema","schema":` + schema + `}}`, schema, "output_config.format"},
		{"beta output_format", `"output_format":{"type":"json_schema","schema":` + schema + `}`, schema, "output_format"},
		{"null format beside output_format", `"output_config":{"format":null},"output_format":{"type":"json_schema","schema":{}}`, `{}`, "output_format"},
		{"effort only", `"output_config":{"effort":"high"}`, "", ""},
		{"null format", `"output_config":{"format":null},"output_format":null`, "", ""},
		{"strict tool", `"tools":[{"name":"t","strict":true,"input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPlan(t, `{"model":"m","max_tokens":5,`+tt.fields+`,`+msgs+`}`)
			got := ""
			if rf := p.req.ResponseFormat; rf != nil {
				got = string(rf.Schema)
			}
			if got != tt.want || p.formatParam != tt.param {
				t.Errorf("schema %q (from %q), want %q (from %q)", got, p.formatParam, tt.want, tt.param)
			}
		})
	}
}

// TestFormatEngineError: the engine's refusal of a schema names OpenAI's
// response_format; the answer names the field the format came in. Other
// errors, and requests without a format, are left as they are.
func TestFormatEngineError(t *testing.T) {
	refusal := &prompt.InvalidRequestError{Err: errors.New(`response_format: the schema keyword "$ref" at "" cannot be enforced`)}
	tests := []struct {
		param string
		err   error
		want  string
	}{
		{"output_config.format", refusal, `output_config.format.schema: the schema keyword "$ref" at "" cannot be enforced`},
		{"output_format", refusal, `output_format.schema: the schema keyword "$ref" at "" cannot be enforced`},
		{"", refusal, `response_format: the schema keyword "$ref" at "" cannot be enforced`},
		{"output_config.format", &prompt.InvalidRequestError{Err: errors.New("the prompt is empty")}, "the prompt is empty"},
	}
	for _, tt := range tests {
		e := (&plan{formatParam: tt.param}).engineError(tt.err, "m")
		if e.Status != 400 || e.Type != TypeInvalidRequest || e.Message != tt.want {
			t.Errorf("%q: %d %s %q, want 400 %q", tt.param, e.Status, e.Type, e.Message, tt.want)
		}
	}
}
