package chattemplate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// This file generates the parity corpus: seeded, deterministic
// conversations for each template family, valid ones and some the
// templates (or Python) reject.

// expectation says what the reference must do with a case.
type expectation int

const (
	// expectRender: Python renders, and Go must render the same bytes.
	expectRender expectation = iota
	// expectRaise: the template calls raise_exception; Go must fail with a
	// *TemplateError carrying the same message and Raised set.
	expectRaise
	// expectInvalid: the input is invalid for the family and Python fails
	// (a TypeError or UndefinedError inside the template). Go fails too,
	// or renders where the engine is more lenient than Python; either is
	// counted, neither is a mismatch.
	expectInvalid
)

func (e expectation) String() string {
	return [...]string{"render", "raise", "invalid"}[e]
}

type parityCase struct {
	id       string
	family   string
	note     string
	expect   expectation
	input    Input
	bos, eos string
	// conform, when set, is the shape the family's template expects:
	// Python puts the messages into it with its own json module before
	// rendering, Go with Shape.Conform (see openai_parity_test.go).
	conform *Shape
}

type gen struct {
	r *rand.Rand
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }
func (g *gen) intn(n int) int        { return g.r.IntN(n) }
func (g *gen) between(lo, hi int) int {
	return lo + g.r.IntN(hi-lo+1)
}

func pick[T any](g *gen, xs []T) T { return xs[g.r.IntN(len(xs))] }

// snippets mixes plain text with what breaks naive renderers: quotes,
// backslashes, newlines, non-ASCII, whitespace Python and Go disagree on,
// template syntax and special-token lookalikes.
var snippets = []string{
	"Hello!",
	"What's the weather in Paris tomorrow?",
	"Résumé, café, naïve — déjà vu.",
	"日本語のテキストです。",
	"中文内容：你好，世界！",
	"emoji 🎉🚀👩‍💻 done",
	"Ελληνικά και עברית و العربية",
	`He said "hi" and 'bye'.`,
	`C:\Users\me\file.txt`,
	`a literal \n and \t and \\ here`,
	"line one\nline two\n\nline four",
	"\ttabbed\tcolumns",
	"   padded both sides   ",
	"ends with newline\n",
	"\n\nstarts with newlines",
	"{{ not_a_variable }} {% if %}",
	"<tool_call>\n{\"name\": \"fake\"}\n</tool_call>",
	"<|im_end|> <|eot_id|> <｜User｜>",
	`{"json": ["inside", 1, 2.5, null]}`,
	"x = a + b * (c - d) / 2",
	"sep\u2028line\u2029para",
	"no\u00a0break\u00a0space",
	"zero\u200bwidth\ufeffjoiner",
	"unit\x1fseparator\x1e",
	"vertical\vtab\fform feed",
	"combining e\u0301 and n\u0303",
	"Ω ≈ ç √ ∫ ∑ ∞",
	"None",
	"true",
	"",
	"    ",
	"the end.",
}

func (g *gen) text() string {
	n := g.between(1, 3)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = pick(g, snippets)
	}
	return strings.Join(parts, pick(g, []string{" ", "\n", "", "\n\n"}))
}

// nonEmptyText is text with at least one visible character.
func (g *gen) nonEmptyText() string {
	for {
		if s := g.text(); strings.TrimSpace(s) != "" {
			return s
		}
	}
}

var (
	toolNames = []string{"get_weather", "search_web", "run_python", "lookup_stock", "translate", "send_email", "calc"}
	propNames = []string{"zeta", "location", "unit", "alpha", "城市", "query", "max_results", "options", "Beta", "_private", "données", "limit", "filters"}
	floats    = []float64{0.5, 1.0, math.Copysign(0, -1), 1e-07, 2.5e+20, 100.0, 3.14159, 1e16, 123456789.0, 0.0001, -2.75, 1e22}
)

// scalar returns a JSON scalar: strings, ints, floats, bools, null.
func (g *gen) scalar() any {
	switch g.intn(6) {
	case 0:
		return g.text()
	case 1:
		return int64(g.between(-1000, 100000))
	case 2:
		return pick(g, floats)
	case 3:
		return g.chance(0.5)
	case 4:
		return nil
	default:
		return pick(g, []string{"celsius", "fahrenheit", "Zürich", "東京", "a\"b", `c\d`})
	}
}

// jsonValue returns a random JSON value nested up to depth levels.
func (g *gen) jsonValue(depth int) any {
	if depth <= 0 || g.chance(0.5) {
		return g.scalar()
	}
	if g.chance(0.5) {
		n := g.intn(4)
		list := make([]any, n)
		for i := range list {
			list[i] = g.jsonValue(depth - 1)
		}
		return list
	}
	return g.object(depth - 1)
}

// object returns an object with unsorted, sometimes non-ASCII keys.
func (g *gen) object(depth int) *Object {
	o := &Object{}
	for range g.intn(4) {
		o.Set(pick(g, propNames), g.jsonValue(depth))
	}
	return o
}

// schema returns a JSON schema for a property, nesting up to depth.
func (g *gen) schema(depth int) *Object {
	switch k := g.intn(5); {
	case k == 0 && depth > 0:
		props := &Object{}
		var required []any
		for range g.between(1, 3) {
			name := pick(g, propNames)
			props.Set(name, g.schema(depth-1))
			if g.chance(0.5) {
				required = append(required, name)
			}
		}
		s := NewObject("type", "object", "properties", props)
		if required != nil {
			s.Set("required", required)
		}
		return s
	case k == 1 && depth > 0:
		return NewObject("type", "array", "description", g.text(), "items", g.schema(depth-1))
	case k == 2:
		return NewObject("type", "string", "enum", []any{"celsius", "fahrenheit", "開氏"}, "description", "Température unit")
	case k == 3:
		s := NewObject("type", pick(g, []string{"number", "integer"}), "description", g.text())
		if g.chance(0.5) {
			s.Set("default", pick(g, floats))
		}
		if g.chance(0.3) {
			s.Set("minimum", int64(0)).Set("maximum", int64(g.between(1, 500)))
		}
		return s
	default:
		s := NewObject("type", "string", "description", g.text())
		if g.chance(0.2) {
			s.Set("nullable", true).Set("default", nil)
		}
		return s
	}
}

// tool returns an OpenAI-style tool definition.
func (g *gen) tool() *Object {
	params := g.schema(3)
	if params.Len() == 0 || g.chance(0.5) {
		props := &Object{}
		for range g.between(0, 3) {
			props.Set(pick(g, propNames), g.schema(2))
		}
		params = NewObject("type", "object", "properties", props, "required", []any{})
	}
	fn := NewObject("name", pick(g, toolNames), "description", g.text(), "parameters", params)
	if g.chance(0.1) {
		fn.Set("strict", true)
	}
	return NewObject("type", "function", "function", fn)
}

func (g *gen) tools() []*Object {
	out := make([]*Object, g.between(1, 3))
	for i := range out {
		out[i] = g.tool()
	}
	return out
}

// arguments returns tool-call arguments as an object or a JSON string.
func (g *gen) arguments(asString bool) any {
	args := g.object(2)
	if !asString {
		return args
	}
	return g.jsonText(args, []pyJSONOptions{
		{itemSep: ", ", keySep: ": "},
		{itemSep: ",", keySep: ":"},
		{itemSep: ",", keySep: ": ", indented: true, indent: "  "},
	})
}

// jsonText writes o as JSON with one of the formattings in opts.
func (g *gen) jsonText(o *Object, opts []pyJSONOptions) string {
	v, err := toValue(o)
	if err != nil {
		panic(err)
	}
	s, err := encodePyJSON(v, pick(g, opts))
	if err != nil {
		panic(err)
	}
	return s
}

func (g *gen) callID() string {
	return fmt.Sprintf("call_%08x", g.r.Uint32())
}

// toolCall returns {"id", "type", "function": {"name", "arguments"}}.
func (g *gen) toolCall(stringArgs bool) *Object {
	fn := NewObject("name", pick(g, toolNames), "arguments", g.arguments(stringArgs))
	return NewObject("id", g.callID(), "type", "function", "function", fn)
}

func msg(role string, content any) *Object {
	return NewObject("role", role, "content", content)
}

// userTurns returns a user message, sometimes one that only wraps a tool
// response (Qwen3 treats those as part of the previous tool exchange).
func (g *gen) user() *Object {
	if g.chance(0.1) {
		return msg("user", "<tool_response>\n"+g.text()+"\n</tool_response>")
	}
	return msg("user", g.nonEmptyText())
}

// think returns reasoning text wrapped the ways models emit it.
func (g *gen) thinkInline(reasoning, answer string) string {
	return pick(g, []string{
		"<think>\n" + reasoning + "\n</think>\n\n" + answer,
		"<think>" + reasoning + "</think>" + answer,
		reasoning + "\n</think>\n" + answer,
		"<think>\n\n</think>\n\n" + answer,
	})
}
