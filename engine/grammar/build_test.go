package grammar

import (
	"errors"
	"maps"
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

// wantAccepts checks which whole documents g accepts.
func wantAccepts(t *testing.T, g *Grammar, docs map[string]bool) {
	t.Helper()
	for text, ok := range docs {
		m := g.NewMatcher()
		if _, accepted := m.AdvanceBytes([]byte(text)); (accepted && m.Done()) != ok {
			t.Errorf("%q: accepted %v, want %v", text, accepted && m.Done(), ok)
		}
	}
}

// TestXMLParameters: Qwen3-Coder parameters (and GLM-4.5's), raw strings
// and JSON values; what the format cannot carry is refused by keyword.
func TestXMLParameters(t *testing.T) {
	schema := `{"type":"object","properties":{"city":{"type":"string","maxLength":5},"n":{"type":"integer","minimum":0},"unit":{"enum":["c","f"]}},"required":["city"]}`
	b := NewBuilder()
	params, err := b.XMLParameters([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.Build(b.Sequence(append(append([]Expr{b.Literal("<function=f>\n")}, params...), b.Literal("</function>"))...))
	if err != nil {
		t.Fatal(err)
	}
	wantAccepts(t, g, map[string]bool{
		"<function=f>\n<parameter=city>\nParis\n</parameter>\n</function>":                                  true,
		"<function=f>\n<parameter=city>\nParis\n</parameter>\n<parameter=n>\n12\n</parameter>\n</function>": true,
		"<function=f>\n<parameter=city>\nx\n</parameter>\n<parameter=unit>\nf\n</parameter>\n</function>":   true,
		"<function=f>\n</function>":                                                                                                       false, // city is required
		"<function=f>\n<parameter=city>\nParis!\n</parameter>\n</function>":                                                               false, // maxLength
		"<function=f>\n<parameter=city>\na<b\n</parameter>\n</function>":                                                                  false,
		"<function=f>\n<parameter=city>\n\"q\"\n</parameter>\n</function>":                                                                false,
		"<function=f>\n<parameter=city>\nx\n</parameter>\n<parameter=n>\n-1\n</parameter>\n</function>":                                   false,
		"<function=f>\n<parameter=city>\nx\n</parameter>\n<parameter=unit>\nf\n</parameter>\n<parameter=n>\n1\n</parameter>\n</function>": false, // order
	})
	// What the output parser is told of each parameter.
	if got, want := XMLParamTypes([]byte(schema)), map[string]string{"city": "string", "n": "integer", "unit": "string"}; !maps.Equal(got, want) {
		t.Errorf("XMLParamTypes = %v, want %v", got, want)
	}
	// GLM-4.5's tags around the same values.
	b = NewBuilder()
	if params, err = b.GLMParameters([]byte(schema)); err != nil {
		t.Fatal(err)
	}
	if g, err = b.Build(b.Sequence(append(append([]Expr{b.Literal("<tool_call>f\n")}, params...), b.Literal("</tool_call>"))...)); err != nil {
		t.Fatal(err)
	}
	wantAccepts(t, g, map[string]bool{
		"<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>":                                                true,
		"<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>x</arg_value>\n<arg_key>n</arg_key>\n<arg_value>12</arg_value>\n</tool_call>":   true,
		"<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>x</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>": true,
		"<tool_call>f\n</tool_call>": false, // city is required
		"<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>a<b</arg_value>\n</tool_call>":                                                   false,
		"<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>x</arg_value>\n<arg_key>n</arg_key>\n<arg_value>\"1\"</arg_value>\n</tool_call>": false,
	})
	for schema, kw := range map[string]string{
		`{"type":"object","properties":{"x":{"type":["string","integer"]}}}`:   "type",
		`{"type":"object","properties":{"x":{"type":"string","pattern":"<"}}}`: "pattern",
		`{"type":"object","required":["y"],"properties":{"x":{}}}`:             "required",
		`{"anyOf":[{"type":"object"}]}`:                                        "anyOf",
		`{"type":"object","properties":{"x":{"enum":["a\nb"]}}}`:               "enum",
	} {
		b := NewBuilder()
		params, err := b.XMLParameters([]byte(schema))
		if err == nil {
			_, err = b.Build(b.Sequence(append(params, b.Literal("end"))...))
		}
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != kw {
			t.Errorf("%s: %v, want an unsupported %q", schema, err, kw)
		}
	}
}
