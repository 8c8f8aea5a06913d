package openai_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// servedFamilies are a tiny demo model of every architecture create-demo
// writes (mlx-community's layouts), each with the features its config
// switches on, and the demo's byte-level vocabulary and template (Qwen3's
// kind, Qwen3.5's for qwen3_5), except where template names a real one
// (the fixtures' chat_template.jinja of that name: its call format is
// then the one parsed and forced). Real tokenizers are the SDK suites'
// and engine/runner's tests.
var servedFamilies = []struct {
	arch     string
	opts     demo.Options
	template string
}{
	{"llama", demo.Options{}, ""},
	{"qwen3", demo.Options{}, ""},
	{"mistral", demo.Options{}, ""},
	{"mistral3", demo.Options{}, "mistral_small3"},
	{"ministral3", demo.Options{}, ""},
	{"phi3", demo.Options{}, "phi3_5"},
	{"gemma3_text", demo.Options{Layers: 4, SlidingWindow: 16, SlidingPattern: 2}, ""},
	{"gemma4_text", demo.Options{Layers: 4, Hidden: 64, Heads: 2, KVHeads: 1, Intermediate: 64, SlidingWindow: 16, SlidingPattern: 2}, ""},
	{"qwen3_moe", demo.Options{Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32}, ""},
	{"gpt_oss", demo.Options{Hidden: 32, Heads: 2, KVHeads: 1, MoEIntermediate: 32}, ""},
	{"deepseek_v3", demo.Options{Layers: 3, Hidden: 128, Heads: 4, HeadDim: 64, Intermediate: 256, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64}, ""},
	{"glm4_moe", demo.Options{Layers: 3, Hidden: 128, Heads: 4, HeadDim: 64, Intermediate: 256, Experts: 8, ExpertsPerTok: 2, MoEIntermediate: 64}, "glm4_5"},
	{"qwen3_next", demo.Options{Layers: 4, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32}, ""},
	{"qwen3_5", demo.Options{Layers: 4, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16}, ""},
	{"qwen3_5_moe", demo.Options{Layers: 4, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32}, "qwen3_5"},
}

// TestFamiliesServed serves a demo model of every family from node a of a
// two-node cluster and asks node b, which forwards over gRPC, through each
// dialect: an OpenAI chat completion, one call forced through the tool
// grammar (parallel calls off), an Anthropic message and an OpenClaw
// agent turn, each answered in full with the family's template and
// parser; each template's prompt is checked first.
func TestFamiliesServed(t *testing.T) {
	models := t.TempDir()
	for i, f := range servedFamilies {
		o := f.opts
		o.Arch, o.Seed = f.arch, uint64(20+i)
		if f.template != "" {
			o.TemplateFrom = filepath.Join(testenv.TokenizerFileDir(t, f.template, "chat_template.jinja"), "chat_template.jinja")
		}
		if _, err := demo.Create(filepath.Join(models, f.arch), o); err != nil {
			t.Fatalf("%s: %v", f.arch, err)
		}
	}
	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir()})
	b := nodes[1]
	// A system prompt keeps Mistral Small 3.2's template from writing its
	// own (3 KB: a long prefill in the demo's small vocabulary).
	msgs := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}}
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 8}}, "required": []string{"city"}}}}

	// How each template ends the prompt of msgs.
	promptEnds := map[string]string{
		"mistral3":    "[INST]hello there[/INST]",
		"phi3":        "<|user|>\nhello there<|end|>\n<|assistant|>\n",
		"glm4_moe":    "<|user|>\nhello there<|assistant|>",
		"qwen3_5":     "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n<think>\n",
		"qwen3_5_moe": "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n<think>\n",
	}
	for _, f := range servedFamilies {
		t.Run(f.arch, func(t *testing.T) {
			var tok struct{ Prompt string }
			end, ok := promptEnds[f.arch]
			if !ok {
				end = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
			}
			if code := post(t, b, "/tokenize", map[string]any{"model": f.arch, "messages": msgs}, &tok); code != http.StatusOK || !strings.HasSuffix(tok.Prompt, end) {
				t.Fatalf("tokenize: %d %q, want it to end with %q", code, tok.Prompt, end)
			}
			var chat struct {
				Choices []struct {
					Message struct {
						Content   string `json:"content"`
						ToolCalls []struct {
							Function struct{ Name, Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
				Error any `json:"error"`
			}
			if code := post(t, b, "/v1/chat/completions", map[string]any{"model": f.arch, "max_tokens": 6, "messages": msgs}, &chat); code != http.StatusOK {
				t.Fatalf("chat completion: %d %+v", code, chat.Error)
			}
			if len(chat.Choices) != 1 || chat.Usage.CompletionTokens < 1 || chat.Usage.CompletionTokens > 6 || chat.Choices[0].FinishReason == "" {
				t.Fatalf("chat completion: %+v", chat)
			}

			chat.Choices, chat.Error = nil, nil
			code := post(t, b, "/v1/chat/completions", map[string]any{"model": f.arch, "max_tokens": 80, "messages": msgs,
				"tools": []any{tool}, "tool_choice": "required", "parallel_tool_calls": false}, &chat)
			switch {
			case code != http.StatusOK:
				t.Fatalf("forced call: %d %+v", code, chat.Error)
			case len(chat.Choices) != 1 || len(chat.Choices[0].Message.ToolCalls) != 1 ||
				chat.Choices[0].Message.ToolCalls[0].Function.Name != "get_weather" || chat.Choices[0].FinishReason != "tool_calls":
				t.Fatalf("forced call: %+v", chat)
			}

			var msg struct {
				Content []struct {
					Type, Text string
				} `json:"content"`
				StopReason string `json:"stop_reason"`
				Usage      struct {
					OutputTokens int `json:"output_tokens"`
				} `json:"usage"`
				Error any `json:"error"`
			}
			if code := post(t, b, "/v1/messages", map[string]any{"model": f.arch, "max_tokens": 6, "system": "Be brief.", "messages": msgs[1:]}, &msg); code != http.StatusOK {
				t.Fatalf("message: %d %+v", code, msg.Error)
			}
			if msg.Usage.OutputTokens < 1 || msg.Usage.OutputTokens > 6 || msg.StopReason == "" {
				t.Fatalf("message: %+v", msg)
			}

			var session struct {
				SessionID string `json:"session_id"`
				Error     any    `json:"error"`
			}
			if code := post(t, b, "/v1/openclaw/agent/sessions", map[string]any{"model": f.arch, "system_prompt": "Be brief."}, &session); code != http.StatusOK || session.SessionID == "" {
				t.Fatalf("agent session: %d %+v", code, session)
			}
			var turn struct {
				SessionID string  `json:"session_id"`
				Content   *string `json:"content"`
				ToolCalls []any   `json:"tool_calls"`
				Usage     struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
				Error any `json:"error"`
			}
			if code := post(t, b, "/v1/openclaw/agent/turns?session_id="+session.SessionID, map[string]any{"messages": msgs[1:], "max_tokens": 6}, &turn); code != http.StatusOK {
				t.Fatalf("agent turn: %d %+v", code, turn.Error)
			}
			if turn.SessionID != session.SessionID || turn.Content == nil || turn.Usage.PromptTokens < 1 || turn.Usage.CompletionTokens < 1 {
				t.Fatalf("agent turn: %+v", turn)
			}
		})
	}
}
