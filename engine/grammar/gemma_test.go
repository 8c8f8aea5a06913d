package grammar

import (
	"errors"
	"testing"
)

// TestGemmaArguments: Gemma 4's argument notation per schema feature —
// bare keys in dictsort order, <|"|> strings, JSON numbers, booleans,
// null (and None), arrays, nested and free-form objects, enums — and
// what it refuses.
func TestGemmaArguments(t *testing.T) {
	const q = `<|"|>`
	tests := []struct {
		name, schema string
		valid        []string
		invalid      []string
	}{
		{"string", `{"type":"object","properties":{"city":{"type":"string","maxLength":5}},"required":["city"]}`,
			[]string{`{city:` + q + `Paris` + q + `}`, `{city:` + q + q + `}`, `{city:` + q + `a b<c` + q + `}`},
			[]string{`{}`, `{city:"Paris"}`, `{city:` + q + `Parisx` + q + `}`, `{"city":` + q + `P` + q + `}`, `{ city:` + q + `P` + q + `}`,
				`{city:` + q + `a"b` + q + `}`, `{city:` + q + "a\nb" + q + `}`}},
		{"order and optional", `{"type":"object","properties":{"b":{"type":"integer"},"A":{"type":"boolean"},"c":{"type":"number"}},"required":["b"]}`,
			[]string{`{b:1}`, `{A:true,b:-2}`, `{A:false,b:0,c:1.5e3}`, `{b:7,c:-0.25}`},
			[]string{`{b:1,A:true}`, `{A:true}`, `{b:1.5}`, `{b:01}`, `{b:1,}`, `{,b:1}`}},
		{"null and enum", `{"type":"object","properties":{"n":{"type":"null"},"u":{"enum":["C","F",null,2,{"k":"v"}]}},"required":["n","u"]}`,
			[]string{`{n:null,u:` + q + `C` + q + `}`, `{n:None,u:None}`, `{n:null,u:2}`, `{n:null,u:{k:` + q + `v` + q + `}}`},
			[]string{`{n:nil,u:2}`, `{n:null,u:` + q + `K` + q + `}`, `{n:null,u:"C"}`}},
		{"arrays and nesting", `{"type":"object","properties":{"xs":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]},"maxItems":2}},"required":["xs"]}`,
			[]string{`{xs:[]}`, `{xs:[{id:1}]}`, `{xs:[{id:1},{id:2}]}`},
			[]string{`{xs:[{id:1},{id:2},{id:3}]}`, `{xs:[{}]}`, `{xs:{id:1}}`}},
		{"free-form object", `{"type":"object","properties":{"m":{"type":"object"}},"required":["m"]}`,
			[]string{`{m:{}}`, `{m:{a:1,b_2:` + q + `x` + q + `,c:[true,null,{d:{}}]}}`},
			[]string{`{m:{"a":1}}`, `{m:{1a:1}}`, `{m:{a b:1}}`}},
		{"quoted key", `{"type":"object","properties":{"a key":{"type":"integer"}},"required":["a key"]}`,
			[]string{`{` + q + `a key` + q + `:1}`},
			[]string{`{a key:1}`}},
		{"pattern", `{"type":"object","properties":{"d":{"type":"string","format":"date"}},"required":["d"]}`,
			[]string{`{d:` + q + `2026-12-03` + q + `}`},
			[]string{`{d:` + q + `2026-13-03` + q + `}`}},
		{"ref recursion", `{"type":"object","properties":{"t":{"$ref":"#/$defs/n"}},"required":["t"],"$defs":{"n":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}}}}}`,
			[]string{`{t:{}}`, `{t:{kids:[{},{kids:[]}]}}`},
			[]string{`{t:{kids:[1]}}`}},
		{"no schema", ``,
			[]string{`{}`, `{x:1,y:[` + q + `s` + q + `]}`},
			[]string{`[]`, `{"x":1}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder()
			var schema []byte
			if tc.schema != "" {
				schema = []byte(tc.schema)
			}
			args, err := b.GemmaArguments(schema)
			if err != nil {
				t.Fatal(err)
			}
			g, err := b.Build(b.Sequence(b.Literal("call:f"), args))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.valid {
				m := g.NewMatcher()
				if at, ok := m.AdvanceBytes([]byte("call:f" + s)); !ok || !m.Done() {
					t.Errorf("%s: rejected at byte %d (done %v)", s, at-len("call:f"), m.Done())
				}
			}
			for _, s := range tc.invalid {
				m := g.NewMatcher()
				if _, ok := m.AdvanceBytes([]byte("call:f" + s)); ok && m.Done() {
					t.Errorf("%s: accepted", s)
				}
			}
		})
	}
}

func TestGemmaArgumentsRefuses(t *testing.T) {
	for _, schema := range []string{
		`{"type":"object","properties":{"a<|\"|>b":{"type":"integer"}}}`,
		`{"type":"object","properties":{"u":{"enum":["x<|\"|>"]}}}`,
		`{"type":"object","properties":{"u":{"type":"string","contentEncoding":"base64"}}}`,
	} {
		_, err := NewBuilder().GemmaArguments([]byte(schema))
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: %v, want an UnsupportedError", schema, err)
		}
	}
}
