package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

// TestConstrainedThinking (issue #5): with thinking on, Qwen3's template
// leaves <think> to the model, so the constraint lets the first token open
// reasoning and applies the grammar after </think>. A logit bias pushes the
// random-weight Qwen3 to open <think>; it never closes it by itself, so the
// runner must close it in time for a whole document. With thinking off the
// grammar applies from the first token, bias or not.
func TestConstrainedThinking(t *testing.T) {
	r := newSuiteRunner(t)
	tok, err := tokenizer.Load(testenv.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	open, ok1 := tok.TokenID("<think>")
	closeID, ok2 := tok.TokenID("</think>")
	if !ok1 || !ok2 {
		t.Fatal("the Qwen3 tokenizer has no <think> or </think> token")
	}
	nl := tok.Encode("\n\n", false)
	if len(nl) != 1 {
		t.Fatalf("\\n\\n is %v, want one token", nl)
	}
	on, off := true, false
	person := suiteSchemas[1]
	tree := suiteSchemas[22] // recursion through $ref
	weather := functionTool("get_weather", `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)
	weatherParams := compileValidator(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)

	type want int
	const (
		noReasoning   want = iota // the first token is not <think>
		reasoning                 // <think>, reasoning, </think>, then the document
		maybeThinking             // the model's choice
	)
	tests := []struct {
		name      string
		thinking  *bool
		bias      bool // +100 on <think>
		spaces    bool // +100 on "\n\n" too: at most maxSpaces of them after </think>
		schema    string
		choice    engine.ToolChoice // forced tool call when not auto
		maxTokens int
		budget    int // ReasoningBudget
		want      want
	}{
		{"on, schema", &on, true, false, person, engine.ToolChoice{}, 80, 0, reasoning},
		{"omitted (template default on), recursive schema", nil, true, false, tree, engine.ToolChoice{}, 120, 0, reasoning},
		{"on, json_object", &on, true, false, "", engine.ToolChoice{}, 60, 0, reasoning},
		{"on, reasoning budget", &on, true, false, person, engine.ToolChoice{}, 200, 6, reasoning},
		{"on, whitespace after </think>", &on, true, true, person, engine.ToolChoice{}, 80, 4, reasoning},
		// max_tokens from the shortest document + 3 (+7 per run): the
		// first run has just room for <think></think> and the document.
		{"on, tight max_tokens", &on, true, false, person, engine.ToolChoice{}, len(`{"name":"","age":0}`) + 3, 0, maybeThinking},
		{"on, no bias", &on, false, false, person, engine.ToolChoice{}, 80, 0, maybeThinking},
		{"on, required tool call", &on, true, false, "", engine.ToolChoice{Mode: engine.ToolRequired}, 120, 0, reasoning},
		{"on, named tool call", &on, true, false, "", engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather", NoParallel: true}, 120, 0, reasoning},
		{"off, schema", &off, true, false, person, engine.ToolChoice{}, 80, 0, noReasoning},
		{"off, required tool call", &off, true, false, "", engine.ToolChoice{Mode: engine.ToolRequired, NoParallel: true}, 80, 0, noReasoning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			forced := tc.choice.Forced()
			v := compileValidator(t, `{"type":"object"}`)
			if tc.schema != "" {
				v = compileValidator(t, tc.schema)
			}
			const runs = 5
			valid, thought := 0, 0
			for i := range runs {
				req := chat("qwen3-random", fmt.Sprintf("Question %d?", i), tc.maxTokens+7*i)
				seed := int64(100 + i)
				req.Sampling.Temperature, req.Sampling.Seed = 1, &seed
				req.EnableThinking, req.ReasoningBudget = tc.thinking, tc.budget
				if tc.bias {
					req.Sampling.LogitBias = map[int]float64{open: 100}
				}
				if tc.spaces {
					req.Sampling.LogitBias[nl[0]] = 100
				}
				if forced {
					req.Tools, req.ToolChoice = []*chattemplate.Object{weather}, tc.choice
				} else {
					req.ResponseFormat = &engine.ResponseFormat{}
					if tc.schema != "" {
						req.ResponseFormat.Schema = []byte(tc.schema)
					}
				}
				ch, err := r.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				var content, reason strings.Builder
				var calls []engine.ToolCall
				var ids []int
				var final engine.Event
				for ev := range ch {
					content.WriteString(ev.Text)
					reason.WriteString(ev.Reasoning)
					calls = append(calls, ev.ToolCalls...)
					for _, tl := range ev.Tokens {
						ids = append(ids, tl.ID)
					}
					final = ev
				}
				if final.Err != nil {
					t.Fatalf("run %d: %v", i, final.Err)
				}
				text := content.String()

				// The document: content, or the tool calls' arguments.
				if forced {
					if final.FinishReason != engine.FinishToolCalls || text != "" || len(calls) == 0 {
						t.Errorf("run %d: finish %q, content %q, %d calls; want tool_calls, no content", i, final.FinishReason, text, len(calls))
						continue
					}
					bad := false
					for _, c := range calls {
						if c.Name != "get_weather" || validates(weatherParams, c.Arguments) != nil {
							t.Errorf("run %d: call %s(%s) does not fit the tool", i, c.Name, c.Arguments)
							bad = true
						}
					}
					if bad {
						continue
					}
				} else {
					if final.FinishReason != engine.FinishStop {
						t.Errorf("run %d: finish %q, want stop after a whole document", i, final.FinishReason)
					}
					if err := validates(v, text); err != nil {
						t.Errorf("run %d: content %q (reasoning %q): %v", i, text, reason.String(), err)
						continue
					}
				}

				// The reasoning: where the tokens say, and returned apart.
				opened := len(ids) > 0 && ids[0] == open
				closedAt := slices.Index(ids, closeID)
				switch {
				case tc.want == noReasoning && (opened || reason.Len() > 0):
					t.Errorf("run %d: thinking off, yet tokens %v and reasoning %q", i, ids[:min(3, len(ids))], reason.String())
					continue
				case tc.want == reasoning && (!opened || closedAt < 2 || reason.Len() == 0 && !tc.spaces):
					t.Errorf("run %d: want <think>, reasoning, </think>; tokens %v…, </think> at %d, reasoning %q", i, ids[:min(3, len(ids))], closedAt, reason.String())
					continue
				case opened && closedAt < 0:
					t.Errorf("run %d: <think> never closed", i)
					continue
				}
				if tc.spaces {
					// The reasoning is whitespace (trimmed away); then as
					// many "\n\n" as allowed, then the document.
					after := ids[closedAt+1:]
					if len(after) < maxSpaces+1 || slices.ContainsFunc(after[:maxSpaces], func(id int) bool { return id != nl[0] }) || after[maxSpaces] == nl[0] {
						t.Errorf("run %d: after </think>: %v…, want %d × %d then the document", i, after[:min(4, len(after))], maxSpaces, nl[0])
						continue
					}
				}
				if opened {
					thought++
					if strings.Contains(text, "think>") || strings.Contains(reason.String(), "think>") {
						t.Errorf("run %d: think tags leaked: content %q, reasoning %q", i, text, reason.String())
						continue
					}
					if tc.budget > 0 && closedAt-1 > tc.budget {
						t.Errorf("run %d: %d reasoning tokens over a budget of %d", i, closedAt-1, tc.budget)
						continue
					}
				}
				valid++
			}
			t.Logf("%s: %d/%d valid, %d with reasoning", tc.name, valid, runs, thought)
		})
	}

	// Every schema of the suite, reasoning first: the reasoning is closed
	// in time whatever the document's shortest length.
	t.Run("on, suite schemas", func(t *testing.T) {
		valid := 0
		for i, schema := range suiteSchemas {
			req := suiteRequest(i, shortest(t, schema)+8)
			req.EnableThinking = &on
			req.Sampling.LogitBias = map[int]float64{open: 100}
			req.ResponseFormat = &engine.ResponseFormat{Schema: []byte(schema)}
			ch, err := r.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			var content, reason strings.Builder
			first := -1
			var final engine.Event
			for ev := range ch {
				if len(ev.Tokens) > 0 && first < 0 {
					first = ev.Tokens[0].ID
				}
				content.WriteString(ev.Text)
				reason.WriteString(ev.Reasoning)
				final = ev
			}
			if err := validates(compileValidator(t, schema), content.String()); err != nil || final.Err != nil || first != open {
				t.Errorf("schema %d (max_tokens %d): first token %d, content %q, reasoning %q: %v %v", i, req.MaxTokens, first, content.String(), reason.String(), err, final.Err)
				continue
			}
			valid++
		}
		t.Logf("thinking on: %d/%d suite schemas valid after reasoning", valid, len(suiteSchemas))
	})
}

// TestConstraintReasoningBound drives the constraint with the most stubborn
// model: inside reasoning it never closes </think> and tries to end the
// generation at every step; in the document it avoids ending. Whatever
// max_tokens, it opens or is in reasoning as long as allowed, and still
// ends with a whole document and a free slot for the end token.
func TestConstraintReasoningBound(t *testing.T) {
	r := newSuiteRunner(t)
	lm, release, err := r.acquire(context.Background(), "qwen3-random")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	tok := lm.text.Tokenizer()
	open, _ := tok.TokenID("<think>")
	closeID, _ := tok.TokenID("</think>")
	eos := tok.EOS()
	schema := suiteSchemas[22]
	g, err := responseFormatGrammar(&engine.ResponseFormat{Schema: []byte(schema)})
	if err != nil {
		t.Fatal(err)
	}
	rem := g.NewMatcher().Remaining()
	tests := []struct {
		name      string
		think     thinking
		maxTokens int
		reasoning int // reasoning tokens between the tags; -1: no <think>
	}{
		{"inside, no room to reason", thinkingInside, rem + 2, 0},
		{"inside, room for 5", thinkingInside, rem + 7, 5},
		{"inside, room for 40", thinkingInside, rem + 42, 40},
		{"may, too tight to open", thinkingMay, rem + 2, -1},
		{"may, opens and closes at once", thinkingMay, rem + 3, 0},
		{"may, room for 40", thinkingMay, rem + 43, 40},
		{"off", thinkingOff, rem + 43, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newConstraint(lm, g, tc.think, eos)
			var out []int
			ended := false
			for left := tc.maxTokens; left > 0 && !ended; left-- {
				m := c.mask(left)
				id := -1
				if c.phase == phaseThinking || c.phase == phaseMayThink {
					// Stubborn: end now, else open <think>, else anything but </think>.
					for _, want := range append(slices.Clone(eos), open) {
						if m.Allowed(want) {
							id = want
							break
						}
					}
					for cand := 0; id < 0 && cand < tok.VocabSize(); cand++ {
						if cand != closeID && m.Allowed(cand) {
							id = cand
						}
					}
					if id < 0 && m.Allowed(closeID) {
						id = closeID
					}
				} else {
					// In the document: the last allowed token that does not end it.
					for cand := tok.VocabSize() - 1; cand >= 0; cand-- {
						if m.Allowed(cand) && !slices.Contains(eos, cand) {
							id = cand
							break
						}
					}
				}
				if id < 0 { // only the end is left
					if !slices.ContainsFunc(eos, m.Allowed) {
						t.Fatalf("dead end after %v", out)
					}
					ended = true
					break
				}
				if slices.Contains(eos, id) {
					t.Fatalf("the end token allowed while %v (phase %d) after %d tokens", out, c.phase, len(out))
				}
				if err := c.accept(id); err != nil {
					t.Fatal(err)
				}
				out = append(out, id)
			}
			reasoning := -1
			if len(out) > 0 && out[0] == open {
				reasoning = slices.Index(out, closeID) - 1
			} else if tc.think == thinkingInside {
				reasoning = slices.Index(out, closeID)
			}
			if reasoning != tc.reasoning || !c.m.Done() || len(out) > tc.maxTokens-1 {
				t.Errorf("max_tokens %d: %d reasoning tokens (want %d), document done %v, %d tokens used", tc.maxTokens, reasoning, tc.reasoning, c.m.Done(), len(out))
			}
		})
	}
}
