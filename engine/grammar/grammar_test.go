package grammar

import (
	"errors"
	"strings"
	"testing"
)

// accepts feeds doc byte by byte; it returns the offset of the first
// rejected byte (len(doc) if all were accepted) and whether the matcher is
// Done at the end.
func accepts(t *testing.T, g *Grammar, doc string) (int, bool) {
	t.Helper()
	m := g.NewMatcher()
	for i := 0; i < len(doc); i++ {
		if !m.Advance(doc[i]) {
			return i, false
		}
	}
	return len(doc), m.Done()
}

type docCase struct {
	doc    string
	reject int // -1: accepted and complete; -2: accepted but incomplete; else first bad byte
}

func TestDocuments(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		docs   []docCase
	}{
		{"object", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}`, []docCase{
			{`{"a":"x","b":1}`, -1},
			{`{"b":-20}`, -1},
			{`{"a":"x"}`, 8},       // b is required
			{`{"b":1,"a":"x"}`, 6}, // schema order
			{`{ "b":1}`, 1},        // no whitespace
			{`{"c":1}`, 2},
			{`{"b":1.5}`, 6},
			{`{"a":"x",`, -2},
		}},
		{"json_object", `{"type":"object"}`, []docCase{
			{`{}`, -1},
			{`{"k":[1,{"x":null}],"z":"s"}`, -1},
			{`[]`, 0},
			{`{"k"}`, 4},
			{`{"a":tru}`, 8},
		}},
		{"string", `{"type":"string","minLength":2,"maxLength":4}`, []docCase{
			{`"ab"`, -1},
			{`"abcd"`, -1},
			{`"a"`, 2},
			{`"abcde"`, 5},
			{`"é\n\u00e9"`, -1},
			{`"\ud800"`, 3},
			{`"\x"`, 2},
			{"\"a\tb\"", 2},
			{"\"\xff\"", 1},
			{"\"\xed\xa0\x80\"", 2}, // UTF-8 encoded surrogate
			{`"日本"`, -1},
		}},
		{"string enum", `{"type":"string","enum":["red","green",1]}`, []docCase{
			{`"red"`, -1},
			{`"green"`, -1},
			{`"blue"`, 1},
			{`1`, 0}, // filtered by type
			{`"re"`, 3},
		}},
		{"const", `{"const":{"a":[1,true]}}`, []docCase{
			{`{"a":[1,true]}`, -1},
			{`{"a":[1,false]}`, 8},
		}},
		{"enum mixed", `{"enum":[null,1.5,"x",[1],{"k":"v"}]}`, []docCase{
			{`null`, -1}, {`1.5`, -1}, {`"x"`, -1}, {`[1]`, -1}, {`{"k":"v"}`, -1}, {`2`, 0},
		}},
		{"number", `{"type":"number"}`, []docCase{
			{`0`, -1}, {`-0.5e+10`, -1}, {`12.25E-3`, -1}, {`01`, 1}, {`-`, -2}, {`1.`, -2},
			{`1e123`, 4}, {`1234567890123456`, 15}, {`.5`, 0},
		}},
		{"integer", `{"type":"integer"}`, []docCase{{`-17`, -1}, {`1.0`, 1}, {`1e2`, 1}}},
		{"boolean", `{"type":"boolean"}`, []docCase{{`true`, -1}, {`false`, -1}, {`tru`, -2}, {`nul`, 0}}},
		{"null", `{"type":"null"}`, []docCase{{`null`, -1}, {`0`, 0}}},
		{"types", `{"type":["string","null"]}`, []docCase{{`null`, -1}, {`"a"`, -1}, {`1`, 0}}},
		{"array", `{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`, []docCase{
			{`[true]`, -1}, {`[true,false]`, -1}, {`[]`, 1}, {`[true,false,true]`, 11}, {`[1]`, 1},
		}},
		{"anyOf", `{"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"string"}}]}`, []docCase{
			{`5`, -1}, {`["a"]`, -1}, {`[5]`, 1}, {`"a"`, 0},
		}},
		{"oneOf", `{"oneOf":[{"type":"string","maxLength":1},{"type":"boolean"}]}`, []docCase{
			{`"a"`, -1}, {`true`, -1}, {`"ab"`, 2},
		}},
		{"ref recursion", `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}}}`, []docCase{
			{`{"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]}`, -1},
			{`{"v":1,"kids":[{}]}`, 16},
		}},
		{"definitions", `{"definitions":{"s":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/definitions/s"}}}`, []docCase{
			{`{"a":"x"}`, -1}, {`{"a":1}`, 5}, {`{}`, -1},
		}},
		{"pattern", `{"type":"string","pattern":"^[a-c]+-\\d{2}$","maxLength":5}`, []docCase{
			{`"ab-12"`, -1}, {`"a-1"`, 4}, {`"abc-12"`, 3}, {`"a-123"`, 5}, {`"d-12"`, 1},
		}},
		{"pattern unanchored", `{"type":"string","pattern":"x.y"}`, []docCase{
			{`"xzy"`, -1}, {`"aaxéyb"`, -1}, {`"ab`, -2}, {`"ab"`, 3}, {`"xy"`, 3}, {`"x\"y"`, 2},
		}},
		{"format date", `{"type":"string","format":"date"}`, []docCase{
			{`"2024-01-31"`, -1}, {`"2024-04-31"`, 10}, {`"2024-02-29"`, 10}, {`"2024-13-01"`, 7},
		}},
		{"format date-time", `{"type":"string","format":"date-time"}`, []docCase{
			{`"2024-01-31T23:59:59.5+01:00"`, -1}, {`"2024-01-31T23:59:59Z"`, -1}, {`"2024-01-31 23:59:59Z"`, 11},
		}},
		{"format uuid", `{"type":"string","format":"uuid"}`, []docCase{
			{`"123e4567-e89b-12d3-a456-426614174000"`, -1}, {`"123e4567e"`, 9},
		}},
		{"root ref", `{"type":"array","items":{"anyOf":[{"type":"null"},{"$ref":"#"}]}}`, []docCase{
			{`[null,[[],[null]]]`, -1}, {`[1]`, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Compile([]byte(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range tt.docs {
				at, done := accepts(t, g, d.doc)
				switch {
				case d.reject == -1 && (at != len(d.doc) || !done):
					t.Errorf("%s: want accepted and done, got reject at %d done=%v", d.doc, at, done)
				case d.reject == -2 && (at != len(d.doc) || done):
					t.Errorf("%s: want accepted and incomplete, got reject at %d done=%v", d.doc, at, done)
				case d.reject >= 0 && at != d.reject:
					t.Errorf("%s: want reject at %d, got %d (done=%v)", d.doc, d.reject, at, done)
				}
			}
		})
	}
}

func TestUnsupported(t *testing.T) {
	tests := []struct{ schema, keyword, path string }{
		{`{"type":"object","properties":{"x":{"type":"string","pattern":"(?=a)b"}}}`, "pattern", "/properties/x"},
		{`{"type":"string","pattern":"(a)\\1"}`, "pattern", ""},
		{`{"type":"string","pattern":"[é]"}`, "pattern", ""},
		{`{"type":"string","pattern":"a{1000}"}`, "pattern", ""},
		{`{"type":"string","format":"hostname"}`, "format", ""},
		{`{"type":"string","format":"date","pattern":"a"}`, "format", ""},
		{`{"type":"string","format":"date","minLength":1}`, "minLength", ""},
		{`{"type":"number","minimum":0.5}`, "minimum", ""},
		{`{"type":"integer","maximum":1e20}`, "maximum", ""},
		{`{"type":"array","items":{"type":"integer","multipleOf":2}}`, "multipleOf", "/items"},
		{`{"allOf":[{"type":"string","pattern":"a"},{"pattern":"b"}]}`, "allOf", ""},
		{`{"allOf":[{"anyOf":[{"type":"string"}]},{"oneOf":[{"type":"string"}]}]}`, "allOf", ""},
		{`{"allOf":[{"$ref":"#"}]}`, "allOf", ""},
		{`{"type":"array","uniqueItems":true}`, "uniqueItems", ""},
		{`{"type":"array","prefixItems":[{"type":"string"}],"items":[{"type":"string"}]}`, "items", ""},
		{`{"type":"array","prefixItems":[{"type":"string","contains":{}}]}`, "contains", "/prefixItems/0"},
		{`{"type":"object","patternProperties":{"a":{}}}`, "patternProperties", ""},
		{`{"$ref":"http://example.com/s.json"}`, "$ref", ""},
		{`{"$ref":"#/$defs/a","type":"object","$defs":{"a":{}}}`, "$ref", ""},
		{`{"anyOf":[{"type":"string"}],"type":"string"}`, "anyOf", ""},
		{`{"enum":["a"],"maxLength":3}`, "maxLength", ""},
		{`{"$defs":{"a":{"not":{}}},"properties":{"p":{"$ref":"#/$defs/a"}}}`, "not", "/$defs/a"},
	}
	for _, tt := range tests {
		_, err := Compile([]byte(tt.schema))
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: want *UnsupportedError, got %v", tt.schema, err)
			continue
		}
		if ue.Keyword != tt.keyword || ue.Path != tt.path {
			t.Errorf("%s: got keyword %q path %q, want %q %q", tt.schema, ue.Keyword, ue.Path, tt.keyword, tt.path)
		}
		if !strings.Contains(err.Error(), tt.keyword) {
			t.Errorf("error text %q lacks the keyword", err)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"n":{"$ref":"#"}},"required":["n"]}`, // no finite instance
		`{"type":"object","required":["x"],"additionalProperties":false}`,
		`{"type":"strin"}`,
		`{"type":"array","minItems":3,"maxItems":2}`,
		`[`,
	} {
		if _, err := Compile([]byte(s)); err == nil {
			t.Errorf("%s: want error", s)
		}
	}
}

func TestVocabMaskAccept(t *testing.T) {
	g, err := Compile([]byte(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	toks := []string{"", `{"`, `{`, `ok`, `":`, `"ok":`, `true`, `t`, `}`, `false}`, `x`, `"`}
	raw := make([][]byte, len(toks))
	for i, s := range toks {
		raw[i] = []byte(s)
	}
	v := NewVocab(raw, []int{0})
	m := g.NewMatcher()
	mask := make([]uint64, 1)
	allowed := func() []string {
		m.Mask(v, mask)
		var out []string
		for id := range toks {
			if mask[0]&(1<<id) != 0 {
				out = append(out, toks[id])
			}
		}
		return out
	}
	want := func(w ...string) {
		t.Helper()
		if got := allowed(); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Fatalf("allowed %q, want %q", got, w)
		}
	}
	want(`{"`, `{`)
	if err := m.Accept(v, 2); err != nil {
		t.Fatal(err)
	}
	want(`"ok":`, `"`)
	if err := m.Accept(v, 10); err == nil {
		t.Fatal("x accepted")
	}
	for _, id := range []int{11, 3, 4} {
		if err := m.Accept(v, id); err != nil {
			t.Fatal(err)
		}
	}
	snap := m.Snapshot()
	want(`true`, `t`, `false}`)
	if err := m.Accept(v, 9); err != nil {
		t.Fatal(err)
	}
	if !m.Done() {
		t.Fatal("not done")
	}
	want("")
	if err := m.Accept(v, 0); err != nil {
		t.Fatal(err)
	}
	m.Restore(snap)
	c := m.Clone()
	if err := c.Accept(v, 6); err != nil {
		t.Fatal(err)
	}
	want(`true`, `t`, `false}`)
	if err := c.Accept(v, 0); err == nil {
		t.Fatal("EOS before done accepted")
	}
}
