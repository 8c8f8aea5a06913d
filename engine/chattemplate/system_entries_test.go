package chattemplate

import (
	"strings"
	"testing"
	"time"

	"fusion/internal/testenv"
)

// TestLateSystemMessage: a system message after the first turn (what the
// Anthropic dialect hands on for a role "system" entry in messages, which
// current Claude Code sends) renders as Python's jinja2 renders it, and
// each family puts it where router/DESIGN.md says: Qwen3 and Llama 3.x as
// a system turn where it stands, DeepSeek V3 in its system prompt ahead of
// the first user turn.
func TestLateSystemMessage(t *testing.T) {
	tests := []struct {
		family, bos, eos string
		inPlace          bool
	}{
		{"qwen3", "", "<|im_end|>", true},
		{"llama3_1", "<|begin_of_text|>", "<|eot_id|>", true},
		{"llama3_2", "<|begin_of_text|>", "<|eot_id|>", true},
		{"deepseek_v3", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", false},
	}
	templates := map[string]string{}
	var cases []parityCase
	for _, tt := range tests {
		src, err := FromTokenizerConfig(testenv.TokenizerDir(t, tt.family))
		if err != nil {
			t.Fatal(err)
		}
		templates[tt.family] = src
		c := parityCase{id: tt.family, family: tt.family, bos: tt.bos, eos: tt.eos}
		c.input = Input{AddGenerationPrompt: true, BOSToken: tt.bos, EOSToken: tt.eos, Messages: []*Object{
			msg("system", "TOP-PROMPT"), msg("user", "FIRST-QUESTION"), msg("system", "LATE-ENTRY"),
			msg("assistant", "AN-ANSWER"), msg("user", "SECOND-QUESTION"),
		}}
		cases = append(cases, c)
	}
	ref := runReference(t, templates, cases)
	for i, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			tmpl, err := New(templates[tt.family], WithClock(func() time.Time { return pinnedNow }))
			if err != nil {
				t.Fatal(err)
			}
			out, err := tmpl.Render(cases[i].input)
			if r := ref[tt.family]; err != nil || !r.OK || out != r.Output {
				t.Fatalf("Go %q (%v)\nPython %q (%s %s)", out, err, r.Output, r.ErrorType, r.Error)
			}
			late, first := strings.Index(out, "LATE-ENTRY"), strings.Index(out, "FIRST-QUESTION")
			if late < 0 || (late > first) != tt.inPlace {
				t.Errorf("late system entry at %d, first question at %d; in place %v wanted:\n%s", late, first, tt.inPlace, out)
			}
		})
	}
}
