package runner

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/grammar"
	"fusion/engine/parser"
	"fusion/engine/sample"
)

// TestForcedFormatsParse: for every family with a forcible call format,
// documents drawn at random from the forced-call grammar (uniformly among
// allowed tokens of a byte vocabulary, under a budget) are read back by
// that family's output parser as calls of the allowed tools whose
// arguments validate — text only, no content left over.
func TestForcedFormatsParse(t *testing.T) {
	toks := [][]byte{nil} // EOS
	for b := 1; b < 256; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, s := range []string{`{"`, `":`, `","`, `"}`, "\n", "<tool_call>", "</tool_call>", "<parameter=", "</parameter>", "<function=", "Paris", "[TOOL_CALLS]", "function", "```json", "<｜tool▁sep｜>", "é", "get_weather", "city"} {
		toks = append(toks, []byte(s))
	}
	vocab := grammar.NewVocab(toks, []int{0})
	params := `{"type":"object","properties":{"city":{"type":"string","maxLength":6},"days":{"type":"integer","minimum":1,"maximum":7},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},"unit":{"enum":["c","f"]},"code":{"type":"string","pattern":"^[0-9]{2}$"}},"required":["city"],"additionalProperties":false}`
	tools := []*chattemplate.Object{functionTool("get_weather", params), functionTool("now", `{"type":"object","properties":{}}`)}
	validator := compileValidator(t, params)
	rng := rand.New(rand.NewPCG(9, 10))
	mask := sample.NewBitset(len(toks))
	for _, family := range []string{parser.Qwen3, parser.Hermes, parser.Qwen3Coder, parser.Llama3JSON, parser.Mistral, parser.DeepSeekV3} {
		for _, choice := range []engine.ToolChoice{{Mode: engine.ToolRequired}, {Mode: engine.ToolRequired, NoParallel: true}, {Mode: engine.ToolNamed, Name: "get_weather"}} {
			g, err := toolCallGrammar(family, tools, choice, 3)
			if err != nil {
				t.Fatalf("%s: %v", family, err)
			}
			for n := range 30 {
				m := g.NewMatcher()
				budget := m.Remaining() + rng.IntN(60)
				var out []byte
				for used := 0; !m.Ended(); {
					m.SetBudget(budget - used)
					m.Mask(vocab, mask)
					var allowed []int
					for id := range toks {
						if mask.Allowed(id) {
							allowed = append(allowed, id)
						}
					}
					if len(allowed) == 0 {
						t.Fatalf("%s %+v: dead end after %q", family, choice, out)
					}
					id := allowed[rng.IntN(len(allowed))]
					if err := m.Accept(vocab, id); err != nil {
						t.Fatal(err)
					}
					if id != 0 {
						used++
						out = append(out, toks[id]...)
					}
				}
				req := &engine.Request{Messages: []*chattemplate.Object{}, Tools: tools}
				p, err := newOutputParser(family, req, "")
				if err != nil {
					t.Fatal(err)
				}
				o := p.Add(string(out))
				rest, err := p.Finish()
				calls := append(o.Calls, rest.Calls...)
				if err != nil || o.Content+rest.Content != "" || len(calls) == 0 {
					t.Fatalf("%s %+v #%d: %q: err %v, content %q, %d calls", family, choice, n, out, err, o.Content+rest.Content, len(calls))
				}
				if choice.NoParallel && len(calls) != 1 {
					t.Fatalf("%s %+v: %d calls in %q", family, choice, len(calls), out)
				}
				for _, c := range calls {
					var args map[string]any
					if c.Undeclared || json.Unmarshal([]byte(c.Arguments), &args) != nil || choice.Mode == engine.ToolNamed && c.Name != "get_weather" {
						t.Fatalf("%s: call %+v from %q", family, c, out)
					}
					if c.Name == "get_weather" {
						if err := validates(validator, c.Arguments); err != nil {
							t.Fatalf("%s: %s from %q: %v", family, c.Arguments, out, err)
						}
					}
				}
			}
		}
	}
}
