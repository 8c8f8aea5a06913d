package runner

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/internal/testenv"
)

// TestGemma4ForcedAndThinking: a random-weight gemma4_text demo with
// Gemma 4's real vocabulary (the fixture's vocab.gguf) and google's chat
// template. Forced calls (required, named) come out as calls of the
// allowed tools whose arguments validate; with enable_thinking the model
// may open its thought channel before the calls (a logit bias makes it),
// and the runner closes the channel in time for them, or once the
// reasoning budget is spent, also without a grammar. Under -race the
// 262,144-token vocabulary's conversion and grammar vocabulary take most
// of a minute in the race detector, so the race pass skips it and make
// test runs it without -race.
func TestGemma4ForcedAndThinking(t *testing.T) {
	if raceEnabled {
		t.Skip("slow under -race; make test runs it without -race")
	}
	dir := t.TempDir()
	demotest.Create(t, filepath.Join(dir, "gemma4"), demo.Options{Arch: "gemma4_text", Seed: 21, VocabFrom: testenv.TokenizerFileDir(t, "gemma4", "vocab.gguf"),
		Layers: 4, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, SlidingWindow: 16, SlidingPattern: 2, DType: "bf16"})
	r, err := New(Config{ModelsDir: dir, Backend: suiteBackend(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	weather := `{"type":"object","properties":{"city":{"type":"string","maxLength":10},"unit":{"enum":["c","f"]}},"required":["city"],"additionalProperties":false}`
	tools := []*chattemplate.Object{functionTool("get_weather", weather), functionTool("now", ``)}
	start := time.Now()
	checkForced(t, r, "gemma4", tools, engine.ToolChoice{Mode: engine.ToolRequired, NoParallel: true}, []string{"get_weather", "now"}, 1, 2)
	checkForced(t, r, "gemma4", tools, engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather", NoParallel: true}, []string{"get_weather"}, 1, 2)
	t.Logf("4 forced calls in %v", time.Since(start))

	lm, release, err := r.acquire(context.Background(), "gemma4")
	if err != nil {
		t.Fatal(err)
	}
	tok := lm.text.Tokenizer()
	release()
	open, ok1 := tok.TokenID("<|channel>")
	closeID, ok2 := tok.TokenID("<channel|>")
	if !ok1 || !ok2 {
		t.Fatal("Gemma 4's vocabulary has no <|channel> or <channel|> token")
	}
	validator := compileValidator(t, weather)
	on := true
	for _, tc := range []struct {
		name   string
		forced bool
		budget int
		prompt bool // the prompt opens the channel (Anthropic's thinking: StartThinking), no bias
	}{
		{"forced call after the thought channel", true, 0, false},
		{"forced call, reasoning budget", true, 5, false},
		{"forced call, channel opened by the prompt", true, 0, true},
		{"reasoning budget, channel opened by the prompt", false, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 2 {
				req := chat("gemma4", "Weather in Paris?", 100)
				seed := int64(i)
				req.Sampling.Temperature, req.Sampling.Seed = 1, &seed
				req.EnableThinking, req.ReasoningBudget = &on, tc.budget
				if tc.prompt {
					req.StartThinking = true
				} else {
					// Once: the budget counts what is inside the channel.
					req.Sampling.LogitBias = map[int]float64{open: 100}
				}
				if tc.forced {
					req.Tools, req.ToolChoice = tools[:1], engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather", NoParallel: true}
				}
				ch, err := r.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				var content, reasoning strings.Builder
				var calls []engine.ToolCall
				var ids []int
				var final engine.Event
				for ev := range ch {
					content.WriteString(ev.Text)
					reasoning.WriteString(ev.Reasoning)
					calls = append(calls, ev.ToolCalls...)
					for _, tl := range ev.Tokens {
						ids = append(ids, tl.ID)
					}
					final = ev
				}
				if final.Err != nil {
					t.Fatal(final.Err)
				}
				closeAt := slices.Index(ids, closeID)
				first := 1 // the reasoning's first token
				if tc.prompt {
					first = 0
				} else if len(ids) == 0 || ids[0] != open {
					t.Fatalf("run %d: tokens %v: want the thought channel opened first", i, ids)
				}
				if closeAt < first+1 || reasoning.Len() == 0 {
					t.Fatalf("run %d: tokens %v, reasoning %q: want reasoning, then the channel closed", i, ids, reasoning.String())
				}
				if n := closeAt - first; tc.budget > 0 && n > tc.budget {
					t.Errorf("run %d: %d reasoning tokens, budget %d", i, n, tc.budget)
				}
				if !tc.forced {
					if content.Len() == 0 {
						t.Errorf("run %d: no answer after the closed channel", i)
					}
					continue
				}
				if final.FinishReason != engine.FinishToolCalls || len(calls) != 1 || calls[0].Name != "get_weather" || content.Len() > 0 {
					t.Fatalf("run %d: finish %q, calls %+v, content %q", i, final.FinishReason, calls, content.String())
				}
				if err := validates(validator, calls[0].Arguments); err != nil {
					t.Errorf("run %d: %s: %v", i, calls[0].Arguments, err)
				}
			}
		})
	}
}
