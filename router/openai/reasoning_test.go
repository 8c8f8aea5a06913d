package openai

import (
	"testing"
)

// TestChatThinking: enable_thinking, chat_template_kwargs.enable_thinking
// and reasoning_effort set the engine request's thinking (forced start,
// budget as a share of the answer's bound), and their bad or
// contradicting values are 400s naming the field. An effort also sets the
// template variable reasoning_effort (harmony's low/medium/high) unless
// chat_template_kwargs gives it.
func TestChatThinking(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	on, off := true, false
	tests := []struct {
		name   string
		extra  string
		enable *bool
		start  bool
		budget int
		effort any // the template variable reasoning_effort; nil: not set
	}{
		{"nothing: the template decides", ``, nil, false, 0, nil},
		{"enable_thinking true forces the block", `,"enable_thinking":true`, &on, true, 0, nil},
		{"enable_thinking false", `,"enable_thinking":false`, &off, false, 0, nil},
		{"template kwarg true", `,"chat_template_kwargs":{"enable_thinking":true}`, &on, true, 0, nil},
		{"template kwarg false", `,"chat_template_kwargs":{"enable_thinking":false,"other":1}`, &off, false, 0, nil},
		{"effort none", `,"reasoning_effort":"none"`, &off, false, 0, "low"},
		{"effort low without a bound", `,"reasoning_effort":"low"`, &on, true, 0, "low"},
		{"effort minimal", `,"reasoning_effort":"minimal","max_tokens":100`, &on, true, 10, "low"},
		{"effort low", `,"reasoning_effort":"low","max_tokens":100`, &on, true, 20, "low"},
		{"effort medium", `,"reasoning_effort":"medium","max_completion_tokens":100`, &on, true, 50, "medium"},
		{"effort high", `,"reasoning_effort":"high","max_tokens":100`, &on, true, 80, "high"},
		{"effort xhigh", `,"reasoning_effort":"xhigh","max_tokens":100`, &on, true, 95, "high"},
		{"the template variable as given", `,"reasoning_effort":"xhigh","chat_template_kwargs":{"reasoning_effort":"medium"}`, &on, true, 0, "medium"},
		{"effort with a tiny bound", `,"reasoning_effort":"minimal","max_tokens":3`, &on, true, 1, "low"},
		{"effort agreeing with enable_thinking", `,"reasoning_effort":"high","enable_thinking":true,"max_tokens":10`, &on, true, 8, "high"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, e := decodeChat(t, `{"model":"m",`+msgs+tt.extra+`}`)
			if e != nil {
				t.Fatal(e)
			}
			p, e := req.toPlan(Options{}, "id", nil)
			if e != nil {
				t.Fatal(e)
			}
			r := p.reqs[0]
			if (r.EnableThinking == nil) != (tt.enable == nil) || (r.EnableThinking != nil && *r.EnableThinking != *tt.enable) {
				t.Errorf("EnableThinking = %v, want %v", r.EnableThinking, tt.enable)
			}
			if r.StartThinking != tt.start || r.ReasoningBudget != tt.budget {
				t.Errorf("StartThinking %v, ReasoningBudget %d; want %v, %d", r.StartThinking, r.ReasoningBudget, tt.start, tt.budget)
			}
			if got := r.ChatTemplateKwargs["reasoning_effort"]; got != tt.effort {
				t.Errorf("template variable reasoning_effort = %v, want %v", got, tt.effort)
			}
		})
	}

	bad := []struct {
		name, extra, param, code string
	}{
		{"effort unknown", `,"reasoning_effort":"extreme"`, "reasoning_effort", "invalid_value"},
		{"effort number", `,"reasoning_effort":3`, "reasoning_effort", "invalid_type"},
		{"effort against enable_thinking", `,"reasoning_effort":"low","enable_thinking":false`, "reasoning_effort", "invalid_value"},
		{"none against enable_thinking", `,"reasoning_effort":"none","enable_thinking":true`, "reasoning_effort", "invalid_value"},
		{"template kwarg not a boolean", `,"chat_template_kwargs":{"enable_thinking":"yes"}`, "chat_template_kwargs.enable_thinking", "invalid_type"},
		{"template kwarg against enable_thinking", `,"chat_template_kwargs":{"enable_thinking":false},"enable_thinking":true`, "chat_template_kwargs.enable_thinking", "invalid_value"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			req, e := decodeChat(t, `{"model":"m",`+msgs+tt.extra+`}`)
			if e == nil {
				_, e = req.toPlan(Options{}, "id", nil)
			}
			if e == nil || e.Status != 400 || e.Param != tt.param || e.Code != tt.code || e.Type != TypeInvalidRequest {
				t.Errorf("error = %+v, want 400 %s %s", e, tt.param, tt.code)
			}
		})
	}
}
