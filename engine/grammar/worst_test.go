package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"fusion/engine/sample"
)

// worstSchemas cover every supported keyword; the worst-model test samples
// uniformly among the allowed tokens of each.
var worstSchemas = []string{
	`{"type":"object"}`,
	`{}`,
	`true`,
	`{"type":"string"}`,
	`{"type":"string","minLength":3,"maxLength":5}`,
	`{"type":"string","maxLength":0}`,
	`{"type":"number"}`,
	`{"type":"integer"}`,
	`{"type":"boolean"}`,
	`{"type":"null"}`,
	`{"type":["integer","string","null"]}`,
	`{"enum":["red","green","blue",null,1,2.5,[1,"a"],{"k":{"n":true}}]}`,
	`{"type":"string","enum":["a","ab","abc",3]}`,
	`{"const":"fixed \"quoted\" é"}`,
	`{"type":"array"}`,
	`{"type":"array","items":{"type":"integer"}}`,
	`{"type":"array","items":{"type":"string","maxLength":2},"minItems":2,"maxItems":4}`,
	`{"type":"array","items":{"type":"array","items":{"type":"boolean"},"maxItems":2},"minItems":1}`,
	`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"number"},"c":{"type":"boolean"},"d":{"type":"null"}},"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["c"],"additionalProperties":false}`,
	`{"type":"object","properties":{"x":{"type":"integer"}},"required":["x","extra"]}`,
	`{"type":"object","additionalProperties":{"type":"integer"}}`,
	`{"type":"object","additionalProperties":false}`,
	`{"anyOf":[{"type":"string","maxLength":3},{"type":"integer"},{"type":"object","properties":{"t":{"const":"x"}},"required":["t"],"additionalProperties":false}]}`,
	`{"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"v":{"type":"string"}},"required":["kind","v"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"n":{"type":"number"}},"required":["kind"],"additionalProperties":false}]}`,
	`{"type":"object","properties":{"l1":{"type":"object","properties":{"l2":{"type":"object","properties":{"l3":{"type":"object","properties":{"l4":{"type":"array","items":{"type":"object","properties":{"l5":{"type":"array","items":{"type":"string"}}},"required":["l5"]}}},"required":["l4"]}},"required":["l3"]}},"required":["l2"]}},"required":["l1"]}`,
	`{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["value","children"],"additionalProperties":false}}}`,
	`{"definitions":{"list":{"anyOf":[{"type":"null"},{"type":"object","properties":{"head":{"type":"string","maxLength":4},"tail":{"$ref":"#/definitions/list"}},"required":["head","tail"],"additionalProperties":false}]}},"$ref":"#/definitions/list"}`,
	`{"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]},"maxItems":3}`,
	`{"$defs":{"expr":{"anyOf":[{"type":"number"},{"type":"object","properties":{"op":{"enum":["+","-","*"]},"args":{"type":"array","items":{"$ref":"#/$defs/expr"},"minItems":2,"maxItems":2}},"required":["op","args"],"additionalProperties":false}]}},"$ref":"#/$defs/expr"}`,
	`{"type":"object","properties":{"id":{"type":"string","minLength":1,"maxLength":8},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]},"maxItems":3},"meta":{"type":"object"},"score":{"type":["number","null"]},"ok":{"type":"boolean"}},"required":["id","ok"],"additionalProperties":false}`,
	`{"type":"object","properties":{"name":{"type":"string","description":"the name","title":"Name","default":"x"},"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}},"required":["id"]}}},"required":["items"],"$schema":"https://json-schema.org/draft/2020-12/schema"}`,
	`{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2,3}-[0-9]+(\\.[a-z]+)?$"},"free":{"type":"string","pattern":"a|é"},"short":{"type":"string","pattern":"^.+$","maxLength":3}},"required":["code","free","short"],"additionalProperties":false}`,
	`{"type":"array","prefixItems":[{"type":"string","maxLength":3},{"type":"integer"},{"enum":["x","y"]}],"items":false,"minItems":2}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"boolean"},{"const":1}],"additionalItems":{"type":"null"},"maxItems":4}`,
	`{"type":"array","prefixItems":[{"type":"integer"}],"items":{"type":"string","maxLength":2},"minItems":3}`,
	`{"allOf":[{"$ref":"#/$defs/base"},{"type":"object","properties":{"b":{"type":"string","maxLength":3},"a":{"minimum":0}},"required":["b"]}],"$defs":{"base":{"type":"object","properties":{"a":{"type":"integer","maximum":50}},"required":["a"]}}}`,
	`{"allOf":[{"type":["string","integer"]},{"anyOf":[{"type":"integer","minimum":3,"maximum":9},{"type":"string","maxLength":2},{"type":"null"}]}]}`,
	`{"type":"object","properties":{"pet":{"allOf":[{"$ref":"#/$defs/Pet"}],"description":"the pet"}},"required":["pet"],"$defs":{"Pet":{"type":"object","properties":{"name":{"type":"string","maxLength":8}},"required":["name"],"additionalProperties":false}}}`,
	`{"type":"integer","minimum":-5,"maximum":1234}`,
	`{"type":"integer","exclusiveMinimum":0}`,
	`{"type":"integer","minimum":1.5,"exclusiveMaximum":7.5}`,
	`{"type":"number","minimum":0,"exclusiveMaximum":10}`,
	`{"type":"number","minimum":-90,"maximum":90}`,
	`{"type":"number","exclusiveMinimum":2}`,
	`{"type":"object","properties":{"lat":{"type":"number","maximum":-3},"n":{"type":"integer","exclusiveMaximum":0,"minimum":-1000}},"required":["lat","n"],"additionalProperties":false}`,
	`{"type":"array","items":{"anyOf":[{"type":"string","format":"date"},{"type":"string","format":"date-time"},{"type":"string","format":"time"},{"type":"string","format":"uuid"},{"type":"string","format":"ipv4"},{"type":"string","format":"email"}]}}`,
}

// worstVocab: every printable ASCII byte, many multi-byte JSON fragments,
// UTF-8 letters (some split across tokens) and EOS (id 0).
func worstVocab() [][]byte {
	toks := [][]byte{nil} // EOS
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			toks = append(toks, []byte(s))
		}
	}
	for b := 0x20; b <= 0x7e; b++ {
		add(string(rune(b)))
	}
	const frag = `{}[]":,0123456789-`
	for _, a := range frag {
		for _, b := range frag {
			add(string(a) + string(b))
		}
	}
	for _, s := range []string{`{"`, `":`, `","`, `":"`, `"}`, `"]`, `},{`, `true`, `false`, `null`, `tr`, `ue`, `nu`, `ll`,
		`"name`, `"name":`, `"id`, `age`, `value`, `children`, `"children":[`, `head`, `tail":`, `kind`, `"op":`, `args`,
		`123`, `4567`, `00`, `.5`, `e+`, `E-1`, `  `, ` `, "\n", `\n`, `\"`, `\u00e9`, `\u`, `\\`,
		"é", "ü", "日本", "語", "\xe6", "\x97\xa5", "😀", "\xf0\x9f", "\x98\x80", `hello`, ` world`, `red`, `blue`, `"red"`, `"a"`} {
		add(s)
	}
	return toks
}

func TestWorstModel(t *testing.T) {
	gens := 200
	if testing.Short() {
		gens = 20
	}
	toks := worstVocab()
	v := NewVocab(toks, []int{0})
	rng := rand.New(rand.NewPCG(1, 2))
	total := 0
	for i, src := range worstSchemas {
		g, err := Compile([]byte(src))
		if err != nil {
			t.Fatalf("schema %d: %v", i, err)
		}
		sch := validator(t, src)
		mask := sample.NewBitset(len(toks))
		var allowed []int
		maxLen, ok := 0, 0
		for n := 0; n < gens; n++ {
			m := g.NewMatcher()
			var out []byte
			for steps := 0; !m.Ended(); steps++ {
				if steps > 200000 {
					t.Fatalf("schema %d: generation did not end: %.200s...", i, out)
				}
				m.Mask(v, mask)
				allowed = allowed[:0]
				for id := range toks {
					if mask.Allowed(id) {
						allowed = append(allowed, id)
					}
				}
				if len(allowed) == 0 {
					t.Fatalf("schema %d: dead end after %q", i, out)
				}
				id := allowed[rng.IntN(len(allowed))]
				if err := m.Accept(v, id); err != nil {
					t.Fatalf("schema %d: masked token rejected: %v", i, err)
				}
				out = append(out, toks[id]...)
			}
			maxLen = max(maxLen, len(out))
			var x any
			if err := json.Unmarshal(out, &x); err != nil {
				t.Errorf("schema %d: invalid JSON %q: %v", i, out, err)
				continue
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("schema %d: %q does not validate: %v", i, out, err)
				continue
			}
			ok++
		}
		total += ok
		t.Logf("schema %2d: %d/%d valid (longest %d bytes)", i, ok, gens, maxLen)
	}
	fmt.Printf("worst model: %d/%d generations valid over %d schemas\n", total, gens*len(worstSchemas), len(worstSchemas))
}

func validator(t *testing.T, src string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(src)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The validator really asserts formats, so format outputs are checked.
func TestValidatorAssertsFormat(t *testing.T) {
	s := validator(t, `{"type":"string","format":"date"}`)
	for doc, ok := range map[string]bool{`"2024-02-30"`: false, `"2024-02-28"`: true, `"x"`: false} {
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
		if err := s.Validate(inst); (err == nil) != ok {
			t.Errorf("%s: validate err %v", doc, err)
		}
	}
}
