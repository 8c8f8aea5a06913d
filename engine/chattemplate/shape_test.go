package chattemplate

import (
	"testing"

	"fusion/internal/testenv"
)

// TestConform: each shape's conversions, messages left alone where there
// is nothing to convert, odd input passed through without a panic, and
// the caller's messages never modified.
func TestConform(t *testing.T) {
	deepseek := Shape{StringArguments: true, NullCallContent: true}
	tests := []struct {
		name  string
		shape Shape
		in    string // one message, JSON
		want  string
	}{
		{"object family decodes text", Shape{},
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"b\":1,\"a\":{\"x\":null}}"}}]}`,
			`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"b":1,"a":{"x":null}}}}]}`},
		{"object family keeps non-object text", Shape{},
			`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}},{"id":"d","type":"function","function":{"name":"g","arguments":"not json"}}]}`,
			`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}},{"id":"d","type":"function","function":{"name":"g","arguments":"not json"}}]}`},
		{"absent content becomes empty", Shape{},
			`{"role":"assistant","tool_calls":[]}`,
			`{"role":"assistant","tool_calls":[],"content":""}`},
		{"string family keeps the client's text", deepseek,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"b\":1}"}}]}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"b\":1}"}}]}`},
		{"string family writes an object as tojson would", deepseek,
			`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"é":"\"q\"\n","n":[1.0,null]}}}]}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"é\": \"\\\"q\\\"\\n\", \"n\": [1.0, null]}"}}]}`},
		{"string family keeps text next to calls", deepseek,
			`{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
			`{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
		{"string family: an answer without calls gets empty content", deepseek,
			`{"role":"assistant","content":null}`,
			`{"role":"assistant","content":""}`},
		{"other roles untouched", deepseek,
			`{"role":"user","content":null}`,
			`{"role":"user","content":null}`},
		{"thinking field gets the reasoning", Shape{ThinkingField: true},
			`{"role":"assistant","content":"","reasoning_content":"Need it.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}`,
			`{"role":"assistant","content":"","reasoning_content":"Need it.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}],"thinking":"Need it."}`},
		{"thinking field: an answer's reasoning too", Shape{ThinkingField: true},
			`{"role":"assistant","content":"4","reasoning_content":"2+2"}`,
			`{"role":"assistant","content":"4","reasoning_content":"2+2","thinking":"2+2"}`},
		{"thinking field: text next to calls wins", Shape{ThinkingField: true},
			`{"role":"assistant","content":"Let me look.","reasoning_content":"Need it.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}`,
			`{"role":"assistant","content":"Let me look.","reasoning_content":"Need it.","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]}`},
		{"thinking field: a given thinking stays", Shape{ThinkingField: true},
			`{"role":"assistant","content":"4","reasoning_content":"a","thinking":"b"}`,
			`{"role":"assistant","content":"4","reasoning_content":"a","thinking":"b"}`},
		{"no thinking field, no copy", Shape{},
			`{"role":"assistant","content":"4","reasoning_content":"2+2"}`,
			`{"role":"assistant","content":"4","reasoning_content":"2+2"}`},
		{"odd tool calls pass through", Shape{},
			`{"role":"assistant","content":"","tool_calls":[[1,2],"x",{"function":[1]},{"function":{"arguments":[1]}}]}`,
			`{"role":"assistant","content":"","tool_calls":[[1,2],"x",{"function":[1]},{"function":{"arguments":[1]}}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Object
			if err := m.UnmarshalJSON([]byte(tc.in)); err != nil {
				t.Fatal(err)
			}
			in := []*Object{&m}
			out := tc.shape.Conform(in)
			got, err := out[0].MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if after, _ := in[0].MarshalJSON(); string(after) != string(mustMarshal(t, tc.in)) {
				t.Errorf("the caller's message changed: %s", after)
			}
		})
	}
}

func mustMarshal(t *testing.T, s string) []byte {
	t.Helper()
	var m Object
	if err := m.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProbeThinkingField: a template that shows a call's reasoning from
// "thinking" only (as gpt-oss's does) gets ThinkingField; one that reads
// reasoning_content, or both, does not; Harmony reads reasoning_content.
func TestProbeThinkingField(t *testing.T) {
	const calls = `{%- for m in messages %}{{ m.role }}:{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}`
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"thinking", calls + `{% if m.thinking is defined %}[{{ m.thinking }}]{% endif %}{% endfor %}`, true},
		{"reasoning_content", calls + `{% if m.reasoning_content is defined %}[{{ m.reasoning_content }}]{% endif %}{% endfor %}`, false},
		{"either", calls + `{{ m.thinking or m.reasoning_content or "" }}{% endfor %}`, false},
		{"harmony", Harmony, false},
	} {
		tmpl, err := New(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Shape().ThinkingField; got != tc.want {
			t.Errorf("%s: ThinkingField = %v, want %v (shape %+v)", tc.name, got, tc.want, tmpl.Shape())
		}
	}
}

// TestShapeGemma4: Gemma 4's template writes object arguments in its own
// notation and echoes string ones, so its history takes objects.
func TestShapeGemma4(t *testing.T) {
	src, err := FromTokenizerConfig(testenv.TokenizerFileDir(t, "gemma4", "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	if sh := tmpl.Shape(); sh.StringArguments {
		t.Errorf("shape %+v: want object arguments", sh)
	}
}
