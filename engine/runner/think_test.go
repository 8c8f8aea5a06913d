package runner

import (
	"context"
	"strings"
	"testing"

	"fusion/engine/chattemplate"
)

// TestPrefillAndReasoningBudget: a final assistant message is continued
// (the prompt ends inside it, the answer is only the continuation), and
// with a reasoning budget the model closes its <think> block within the
// budget.
func TestPrefillAndReasoningBudget(t *testing.T) {
	r := newDemoRunner(t, Config{})
	for _, budget := range []int{0, 1, 3, 8} {
		req := chat("demo", "Think first.", 30)
		req.Messages = append(req.Messages, chattemplate.NewObject("role", "assistant", "content", "<think>\nLet me see"))
		req.ContinueFinal = true
		req.ReasoningBudget = budget
		seed := int64(budget)
		req.Sampling.Temperature, req.Sampling.Seed = 1, &seed
		p, err := r.Tokenize(context.Background(), "demo", req.PromptRequest())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(p.Prompt, "<|im_start|>assistant\n<think>\nLet me see") {
			t.Fatalf("prompt does not end in the prefill: %q", p.Prompt)
		}
		ch, err := r.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		var reasoning, text string
		for ev := range ch {
			for _, tk := range ev.Tokens {
				ids = append(ids, tk.ID)
			}
			reasoning += ev.Reasoning
			text += ev.Text
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
		}
		closeID, _ := r.models["demo"].loaded.text.Tokenizer().TokenID("</think>")
		at := -1
		for i, id := range ids {
			if id == closeID {
				at = i
				break
			}
		}
		if budget == 0 {
			// The control: left alone, the random model keeps reasoning.
			if len(ids) < 20 || at >= 0 && at < 20 {
				t.Fatalf("no budget: %d tokens, </think> at %d; the test cannot tell", len(ids), at)
			}
			continue
		}
		if len(ids) > budget && (at < 0 || at > budget) {
			t.Errorf("budget %d: </think> at %d of %d tokens", budget, at, len(ids))
		}
		if strings.Contains(text, "Let me see") || strings.Contains(reasoning, "Let me see") {
			t.Errorf("budget %d: the prefill came back in the answer: %q / %q", budget, reasoning, text)
		}
	}
}
