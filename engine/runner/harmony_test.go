package runner

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/parser"
	"fusion/engine/prompt"
	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

// newHarmonyRunner serves a random-weight gpt_oss demo model with gpt-oss's
// real tokenizer (o200k_harmony, 200k tokens), which demo gives the
// Harmony chat template.
func newHarmonyRunner(t *testing.T) *Runner {
	t.Helper()
	dir := t.TempDir()
	if _, err := demo.Create(filepath.Join(dir, "gptoss-random"), demo.Options{Arch: "gpt_oss", Seed: 9,
		VocabFrom: testenv.TokenizerDir(t, "gptoss"), Layers: 2, Hidden: 32, Heads: 2, KVHeads: 1, MoEIntermediate: 32, DType: "bf16"}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{ModelsDir: dir, Backend: suiteBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var harmonyTools = []*chattemplate.Object{
	chattemplate.NewObject("type", "function", "function", chattemplate.NewObject(
		"name", "get_weather", "description", "Weather of a city",
		"parameters", chattemplate.NewObject("type", "object",
			"properties", chattemplate.NewObject("city", chattemplate.NewObject("type", "string", "maxLength", 12),
				"days", chattemplate.NewObject("type", "integer", "maximum", 9)),
			"required", []any{"city"}, "additionalProperties", false))),
	chattemplate.NewObject("type", "function", "function", chattemplate.NewObject("name", "get_time")),
}

// harmonyOutput is what one generation streamed.
type harmonyOutput struct {
	text, reasoning string
	calls           []engine.ToolCall
	ids             []int
	final           engine.Event
}

// generateHarmony runs req and collects its events.
func generateHarmony(t *testing.T, r *Runner, req *engine.Request) harmonyOutput {
	t.Helper()
	ch, err := r.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out harmonyOutput
	for ev := range ch {
		out.text += ev.Text
		out.reasoning += ev.Reasoning
		out.calls = append(out.calls, ev.ToolCalls...)
		for _, tl := range ev.Tokens {
			out.ids = append(out.ids, tl.ID)
		}
		out.final = ev
	}
	return out
}

// noHarmonyMarkers fails if s shows a harmony marker: the parser must have
// taken them all.
func noHarmonyMarkers(t *testing.T, what, s string) {
	t.Helper()
	for _, m := range parser.Markers(parser.Harmony) {
		if strings.Contains(s, m) {
			t.Fatalf("%s %q shows %s", what, s, m)
		}
	}
}

// TestHarmonyServed serves gpt_oss with its harmony format: the prompt is
// rendered by the Harmony template, forced tool calls (required and
// named) come out as harmony calls through the grammar — whatever the
// random model prefers — and are parsed into tool calls whose arguments
// validate; a structured answer is a final message whose body validates.
func TestHarmonyServed(t *testing.T) {
	r := newHarmonyRunner(t)
	ctx := context.Background()
	const model = "gptoss-random"
	tok, err := tokenizer.Load(testenv.TokenizerDir(t, "gptoss"))
	if err != nil {
		t.Fatal(err)
	}

	res, err := r.Tokenize(ctx, model, prompt.Request{
		Messages: []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", "Weather in Paris?")},
		Tools:    harmonyTools,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<|start|>system<|message|>", "Reasoning: medium", "namespace functions {", "type get_time = () => any;",
		"<|start|>user<|message|>Weather in Paris?<|end|>"} {
		if !strings.Contains(res.Prompt, want) {
			t.Errorf("prompt %q lacks %q", res.Prompt, want)
		}
	}
	if !strings.HasSuffix(res.Prompt, "<|end|><|start|>assistant") {
		t.Errorf("prompt ends %q", res.Prompt[max(0, len(res.Prompt)-40):])
	}

	weather := compileValidator(t, `{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","maximum":9}},"required":["city"],"additionalProperties":false}`)
	for _, choice := range []engine.ToolChoice{{Mode: engine.ToolRequired}, {Mode: engine.ToolNamed, Name: "get_weather"}} {
		for seed := range 6 {
			req := chat(model, "Weather in Paris?", 60)
			req.Tools, req.ToolChoice = harmonyTools, choice
			s := int64(seed)
			req.Sampling.Seed, req.Sampling.Temperature = &s, 1.2
			out := generateHarmony(t, r, req)
			text, reasoning, calls, ids, final := out.text, out.reasoning, out.calls, out.ids, out.final
			// The header is written with the special tokens, as gpt-oss
			// writes it, never spelled out with ordinary ones.
			for _, m := range []string{"<|channel|>", "<|constrain|>", "<|message|>"} {
				id, _ := tok.TokenID(m)
				if !slices.Contains(ids, id) {
					t.Fatalf("seed %d: the call %q was not written with the %s token (%v)", seed, tok.Decode(ids, false), m, ids)
				}
			}
			if d := tok.Decode(ids, false); strings.Contains(d, "\x00") {
				t.Fatalf("seed %d: output %q holds a NUL", seed, d)
			}
			if final.Err != nil {
				t.Fatal(final.Err)
			}
			noHarmonyMarkers(t, "text", text)
			if final.FinishReason != engine.FinishToolCalls || len(calls) != 1 || text != "" || reasoning != "" {
				t.Fatalf("choice %+v seed %d: finish %q, calls %+v, text %q, reasoning %q", choice, seed, final.FinishReason, calls, text, reasoning)
			}
			c := calls[0]
			switch {
			case c.Name == "get_weather":
				if err := validates(weather, c.Arguments); err != nil {
					t.Errorf("seed %d: arguments %s: %v", seed, c.Arguments, err)
				}
			case c.Name == "get_time" && choice.Mode == engine.ToolRequired:
				var v map[string]any
				if err := json.Unmarshal([]byte(c.Arguments), &v); err != nil {
					t.Errorf("seed %d: arguments %s: %v", seed, c.Arguments, err)
				}
			default:
				t.Errorf("choice %+v seed %d: call %+v", choice, seed, c)
			}
		}
	}

	// Thinking asked for (Anthropic's thinking enabled): the answer starts
	// in the analysis message, which a budget of 5 tokens closes.
	end, _ := tok.TokenID("<|end|>")
	for seed := range 4 {
		req := chat(model, "Think first.", 24)
		req.StartThinking, req.ReasoningBudget = true, 5
		s := int64(seed)
		req.Sampling.Seed, req.Sampling.Temperature = &s, 1
		out := generateHarmony(t, r, req)
		if out.final.Err != nil {
			t.Fatal(out.final.Err)
		}
		reasoning, ids := out.reasoning, out.ids
		closed := slices.Index(ids, end)
		if closed < 0 || closed > 5 {
			t.Fatalf("seed %d: <|end|> at %d of %v, want within the budget of 5", seed, closed, ids)
		}
		if want := tok.Decode(ids[:closed], false); reasoning != want || reasoning == "" {
			t.Errorf("seed %d: reasoning %q, want the analysis body %q", seed, reasoning, want)
		}
		noHarmonyMarkers(t, "reasoning", reasoning)
	}

	schema := `{"type":"object","properties":{"answer":{"type":"string","maxLength":8},"n":{"type":"integer"}},"required":["answer","n"],"additionalProperties":false}`
	v := compileValidator(t, schema)
	for seed := range 6 {
		req := chat(model, "Answer in JSON.", 40)
		req.ResponseFormat = &engine.ResponseFormat{Schema: []byte(schema)}
		s := int64(seed)
		req.Sampling.Seed, req.Sampling.Temperature = &s, 1.2
		ch, err := r.Generate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		text, calls, final := drain(ch)
		if final.Err != nil {
			t.Fatal(final.Err)
		}
		noHarmonyMarkers(t, "text", text)
		if len(calls) != 0 {
			t.Fatalf("seed %d: calls %+v", seed, calls)
		}
		if err := validates(v, text); err != nil {
			t.Errorf("seed %d: %q: %v", seed, text, err)
		}
	}

	// Both (Anthropic's thinking enabled with output_config.format): the
	// analysis message first, closed by the budget of 5 tokens or by the
	// model; then the final message's header, written with the special
	// tokens, and its body is the document.
	const header = "<|start|>assistant<|channel|>final<|message|>"
	var markers []int
	for _, m := range []string{"<|start|>", "<|channel|>", "<|message|>"} {
		id, _ := tok.TokenID(m)
		markers = append(markers, id)
	}
	for seed := range 6 {
		req := chat(model, "Think, then answer in JSON.", 60)
		req.StartThinking, req.ReasoningBudget = true, 5
		req.ResponseFormat = &engine.ResponseFormat{Schema: []byte(schema)}
		s := int64(seed)
		req.Sampling.Seed, req.Sampling.Temperature = &s, 1.2
		out := generateHarmony(t, r, req)
		if out.final.Err != nil {
			t.Fatal(out.final.Err)
		}
		closed := slices.Index(out.ids, end)
		if closed < 0 || closed > 5 || !strings.HasPrefix(tok.Decode(out.ids[closed+1:], false), header) ||
			slices.ContainsFunc(markers, func(id int) bool { return !slices.Contains(out.ids[closed+1:], id) }) {
			t.Fatalf("seed %d: %q (%v): want the analysis body, <|end|> within the budget of 5, then %s in special tokens",
				seed, tok.Decode(out.ids, false), out.ids, header)
		}
		if want := tok.Decode(out.ids[:closed], false); out.reasoning != want {
			t.Errorf("seed %d: reasoning %q, want the analysis body %q", seed, out.reasoning, want)
		}
		noHarmonyMarkers(t, "reasoning", out.reasoning)
		noHarmonyMarkers(t, "text", out.text)
		if err := validates(v, out.text); err != nil || len(out.calls) != 0 || out.final.FinishReason != engine.FinishStop {
			t.Errorf("seed %d: text %q (%v), calls %+v, finish %q", seed, out.text, err, out.calls, out.final.FinishReason)
		}
	}
}
