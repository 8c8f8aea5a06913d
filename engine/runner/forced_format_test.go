package runner

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
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
	for _, s := range []string{`{"`, `":`, `","`, `"}`, "\n", "<tool_call>", "</tool_call>", "<parameter=", "</parameter>", "<function=", "Paris", "[TOOL_CALLS]", "function", "```json", "<｜tool▁sep｜>", "é", "get_weather", "city",
		"<|tool_call>", "<tool_call|>", `<|"|>`, "call:", "None", "null", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<|tool_call|>", "<|/tool_call|>", "[ARGS]"} {
		toks = append(toks, []byte(s))
	}
	vocab := grammar.NewVocab(toks, []int{0})
	params := `{"type":"object","properties":{"city":{"type":"string","maxLength":6},"days":{"type":"integer","minimum":1,"maximum":7},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},"unit":{"enum":["c","f"]},"code":{"type":"string","pattern":"^[0-9]{2}$"}},"required":["city"],"additionalProperties":false}`
	tools := []*chattemplate.Object{functionTool("get_weather", params), functionTool("now", `{"type":"object","properties":{}}`)}
	validator := compileValidator(t, params)
	// Gemma 4's notation on more of JSON: null (and None), booleans,
	// numbers, nested and free-form objects (bare keys), arrays of strings.
	gemmaParams := `{"type":"object","properties":{"city":{"type":"string","maxLength":6},"days":{"type":"integer","minimum":1,"maximum":7},"tags":{"type":"array","items":{"enum":["a","b",null]},"maxItems":2},"unit":{"enum":["c","f"]},"code":{"type":"string","pattern":"^[0-9]{2}$"},` +
		`"at":{"type":["number","null"]},"ok":{"type":"boolean"},"where":{"type":"object","properties":{"Lat":{"type":"number"},"near":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":2}},"required":["Lat"]},"extra":{"type":"object","additionalProperties":{"type":"integer","maximum":9}}},"required":["city"],"additionalProperties":false}`
	gemmaTools := []*chattemplate.Object{functionTool("get_weather", gemmaParams), functionTool("now", ``)}
	gemmaValidator := compileValidator(t, gemmaParams)
	rng := rand.New(rand.NewPCG(9, 10))
	mask := sample.NewBitset(len(toks))
	for _, family := range []string{parser.Qwen3, parser.Hermes, parser.Qwen3Coder, parser.Llama3JSON, parser.Mistral, parser.MistralArgs, parser.DeepSeekV3, parser.Gemma4, parser.GLM45, parser.Phi4Mini} {
		for _, choice := range []engine.ToolChoice{{Mode: engine.ToolRequired}, {Mode: engine.ToolRequired, NoParallel: true}, {Mode: engine.ToolNamed, Name: "get_weather"}} {
			tools, validator := tools, validator
			if family == parser.Gemma4 {
				tools, validator = gemmaTools, gemmaValidator
			}
			g, err := toolCallGrammar(family, tools, choice, 3)
			if err != nil {
				t.Fatalf("%s: %v", family, err)
			}
			for n := range 20 {
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
				if family == parser.Gemma4 {
					// Read back exactly: the calls written again in Gemma
					// 4's notation are the document (a null as null).
					var again strings.Builder
					for _, c := range calls {
						again.WriteString("<|tool_call>call:" + c.Name + gemmaNotation(t, c.Arguments) + "<tool_call|>")
					}
					if want := gemmaNullsAsJSON(string(out)); again.String() != want {
						t.Fatalf("gemma4 %+v: %q read back as %q", choice, want, again.String())
					}
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

// gemmaNotation writes JSON arguments (key order kept) in Gemma 4's
// notation, keys bare where grammar.GemmaArguments writes them bare.
func gemmaNotation(t *testing.T, args string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	bare := regexp.MustCompile(`^[A-Za-z0-9_$.-]+$`)
	var b strings.Builder
	var value func()
	value = func() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		switch v := tok.(type) {
		case json.Delim:
			b.WriteString(v.String())
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				if v == '{' {
					k, _ := dec.Token()
					key := k.(string)
					if !bare.MatchString(key) {
						key = `<|"|>` + key + `<|"|>`
					}
					b.WriteString(key + ":")
				}
				value()
			}
			end, _ := dec.Token()
			b.WriteString(end.(json.Delim).String())
		case string:
			b.WriteString(`<|"|>` + v + `<|"|>`)
		case nil:
			b.WriteString("null")
		default:
			b.WriteString(fmt.Sprint(v))
		}
	}
	value()
	return b.String()
}

// gemmaNullsAsJSON replaces the None values of Gemma 4's notation (not
// in strings or keys) by null.
func gemmaNullsAsJSON(s string) string {
	var b strings.Builder
	for inStr := false; s != ""; {
		switch {
		case strings.HasPrefix(s, `<|"|>`):
			inStr = !inStr
			b.WriteString(`<|"|>`)
			s = s[5:]
		case !inStr && strings.HasPrefix(s, "None") && b.Len() > 0 && strings.ContainsRune(":,[", rune(b.String()[b.Len()-1])) &&
			(len(s) == 4 || strings.ContainsRune(",]}", rune(s[4]))):
			b.WriteString("null")
			s = s[4:]
		default:
			b.WriteByte(s[0])
			s = s[1:]
		}
	}
	return b.String()
}
