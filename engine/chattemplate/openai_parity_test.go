package chattemplate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/internal/testenv"
)

// The API-shaped parity suite: conversations with tool calls as the
// OpenAI API carries them (arguments a JSON text in whatever formatting
// the client used, with non-ASCII keys, escapes, nested objects and
// nulls; content null or absent next to tool_calls) and, now and then, as
// the Anthropic API carries them (arguments an object, content ""). Go
// renders them after Shape.Conform with the shape it probed from the
// template; Python renders them after its own conform() with the shape
// the family is documented to want (DESIGN.md, "Input shapes per
// family"). Both must give the same bytes, and the probed shape must be
// the documented one.

// apiCasesPerFamily is the number of API-shaped conversations per family.
const apiCasesPerFamily = 160

var apiFamilies = []struct {
	name, fixture string
	bos           string
	seed          uint64
	shape         Shape // what DESIGN.md says the family wants
	// oneCall: the template raises on more than one call per message.
	oneCall bool
	// markers must each appear in some rendering.
	markers []string
}{
	{"qwen3", "qwen3", "", 11, Shape{}, false, []string{`"arguments": {"`, "<tool_response>"}},
	{"llama3_1", "llama3_1", "<|begin_of_text|>", 12, Shape{}, false, []string{"<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>"}},
	{"llama3_2", "llama3_2", "<|begin_of_text|>", 13, Shape{}, true, []string{`"parameters": {"`, "<|start_header_id|>ipython<|end_header_id|>"}},
	{"deepseek_v3", "deepseek_v3", "<｜begin▁of▁sentence｜>", 14, Shape{StringArguments: true, NullCallContent: true}, false, []string{
		"<｜tool▁sep｜>", "```json\n{\"", "```json\n{\n", "<｜tool▁outputs▁end｜>"}},
}

// apiArguments returns a call's arguments as a client sends them: mostly
// JSON text (compact, spaced, indented, or with non-ASCII escaped as
// \uXXXX), sometimes an object (as converted from Anthropic's input).
func (g *gen) apiArguments() any {
	args := g.object(3)
	if g.chance(0.15) {
		return args
	}
	return g.jsonText(args, []pyJSONOptions{
		{itemSep: ",", keySep: ":"},
		{itemSep: ", ", keySep: ": "},
		{itemSep: ",", keySep: ":", ensureASCII: true},
		{itemSep: ",", keySep: ": ", indented: true, indent: "  "},
	})
}

// apiAssistantCalls returns an assistant message calling tools, with
// content null, absent, "" or text, and the tool answers.
func (g *gen) apiAssistantCalls(oneCall bool) []*Object {
	n := 1
	if !oneCall {
		n = g.between(1, 3)
	}
	calls := make([]any, n)
	ids := make([]string, n)
	for i := range calls {
		ids[i] = g.callID()
		calls[i] = NewObject("id", ids[i], "type", "function",
			"function", NewObject("name", pick(g, toolNames), "arguments", g.apiArguments()))
	}
	m := NewObject("role", "assistant")
	switch g.intn(5) {
	case 0, 1:
		m.Set("content", nil)
	case 2:
		// absent, as some clients send it
	case 3:
		m.Set("content", "")
	default:
		m.Set("content", g.nonEmptyText())
	}
	m.Set("tool_calls", calls)
	out := []*Object{m}
	for _, id := range ids {
		out = append(out, NewObject("role", "tool", "tool_call_id", id, "content", g.text()))
	}
	return out
}

// apiCase returns one conversation: an optional system prompt, then one
// to three rounds of a user question, tool exchanges and maybe an answer
// (content null now and then, as some clients echo it).
func (g *gen) apiCase(oneCall bool) Input {
	var msgs []*Object
	if g.chance(0.4) {
		msgs = append(msgs, msg("system", g.nonEmptyText()))
	}
	for range g.between(1, 3) {
		msgs = append(msgs, msg("user", g.nonEmptyText()))
		for range g.between(1, 2) {
			msgs = append(msgs, g.apiAssistantCalls(oneCall)...)
		}
		if g.chance(0.6) {
			answer := any(g.nonEmptyText())
			if g.chance(0.1) {
				answer = nil
			}
			msgs = append(msgs, msg("assistant", answer))
		}
	}
	in := Input{Messages: msgs, AddGenerationPrompt: msgs[len(msgs)-1].vals["role"] != "assistant"}
	if g.chance(0.7) {
		in.Tools = g.tools()
	}
	return in
}

func TestParityAPIHistories(t *testing.T) {
	templates := make(map[string]string)
	compiled := make(map[string]*Template)
	var cases []parityCase
	for _, f := range apiFamilies {
		src, err := FromTokenizerConfig(testenv.TokenizerDir(t, f.fixture))
		if err != nil {
			t.Fatal(err)
		}
		tmpl, err := New(src, WithClock(func() time.Time { return pinnedNow }))
		if err != nil {
			t.Fatalf("compile %s: %v", f.name, err)
		}
		if got := tmpl.Shape(); got != f.shape {
			t.Errorf("%s: probed shape %+v, DESIGN.md says %+v", f.name, got, f.shape)
		}
		templates[f.name], compiled[f.name] = src, tmpl
		g := newGen(f.seed)
		for i := range apiCasesPerFamily {
			c := parityCase{
				id:      fmt.Sprintf("api-%s-%03d", f.name, i),
				family:  f.name,
				note:    "API-shaped history",
				expect:  expectRender,
				input:   g.apiCase(f.oneCall),
				bos:     f.bos,
				conform: &f.shape,
			}
			cases = append(cases, c)
		}
	}
	ref := runReference(t, templates, cases)

	byFamily := make(map[string]*tally)
	for _, c := range cases {
		s := byFamily[c.family]
		if s == nil {
			s = &tally{}
			byFamily[c.family] = s
		}
		r, ok := ref[c.id]
		if !ok {
			t.Fatalf("no reference result for %s", c.id)
		}
		in := c.input
		in.BOSToken = c.bos
		before := describeInput(in)
		in.Messages = compiled[c.family].Shape().Conform(in.Messages)
		out, err := compiled[c.family].Render(in)
		s.compare(c, r, out, err)
		if after := describeInput(c.input); after != before {
			t.Fatalf("%s: Conform changed the caller's messages", c.id)
		}
	}
	for _, f := range apiFamilies {
		s := byFamily[f.name]
		t.Run(f.name, func(t *testing.T) {
			t.Logf("%d cases: %d rendered identical, %d mismatches", apiCasesPerFamily, s.identical, s.mismatches)
			for _, m := range f.markers {
				if !slices.ContainsFunc(s.rendered, func(out string) bool { return strings.Contains(out, m) }) {
					t.Errorf("no rendering contains %q: the generator misses a branch", m)
				}
			}
			if s.mismatches > 0 {
				ids := s.mismatchIDs
				if len(ids) > 10 {
					ids = append(ids[:10:10], "...")
				}
				t.Errorf("%d of %d differ from Python (%s); first: %s", s.mismatches, apiCasesPerFamily, strings.Join(ids, ", "), s.firstMismatch)
			}
		})
	}
}
