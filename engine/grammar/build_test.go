package grammar

import (
	"testing"
)

// toolCallsGrammar is a Hermes-style format: one or two calls of two tools.
func toolCallsGrammar(t *testing.T, maxCalls int) *Grammar {
	t.Helper()
	b := NewBuilder()
	get, err := b.ObjectSchema([]byte(`{"properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	call := b.Choice(
		b.Object(Prop{"name", b.JSONString("get")}, Prop{"arguments", get}),
		b.Object(Prop{"name", b.JSONString("now")}, Prop{"arguments", b.AnyObject()}),
	)
	root := b.Repeat(b.Literal("\n"), 1, maxCalls, b.Literal("<tool_call>\n"), call, b.Literal("\n</tool_call>"))
	g, err := b.Build(root)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestBuilderSequence(t *testing.T) {
	one := "<tool_call>\n{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>"
	two := one + "\n<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"
	tests := []struct {
		name     string
		maxCalls int
		text     string
		ok, done bool
	}{
		{"one call", 1, one, true, true},
		{"prefix", 1, one[:20], true, false},
		{"two calls", 2, two, true, true},
		{"two calls over the limit", 1, two, false, false},
		{"unbounded", -1, two + "\n" + one, true, true},
		{"undeclared name", 1, "<tool_call>\n{\"name\":\"rm\"", false, false},
		{"bad arguments", 1, "<tool_call>\n{\"name\":\"get\",\"arguments\":{\"x\"", false, false},
		{"not an object", 1, "<tool_call>\n{\"name\":\"get\",\"arguments\":[", false, false},
		{"whitespace", 1, "<tool_call> ", false, false},
		{"text after", 1, one + "x", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := toolCallsGrammar(t, tc.maxCalls).NewMatcher()
			_, ok := m.AdvanceBytes([]byte(tc.text))
			if ok != tc.ok || ok && m.Done() != tc.done {
				t.Fatalf("accepted %v, done %v; want %v, %v", ok, m.Done(), tc.ok, tc.done)
			}
		})
	}
}

func TestObjectSchemaRefusesNonObjects(t *testing.T) {
	b := NewBuilder()
	e, err := b.ObjectSchema([]byte(`{"type":"string"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Build(e); err == nil {
		t.Fatal("a string schema was accepted as tool parameters")
	}
}
