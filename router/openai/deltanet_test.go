package openai_test

import (
	"path/filepath"
	"testing"

	"fusion/engine/demo"
	"fusion/node/nodetest"
)

// TestQwen3NextServed serves a qwen3_5_moe demo model (Qwen3.5's Gated
// DeltaNet layers with their recurrent state, gated attention, a mixture
// with a shared expert in every layer; qwen3_next's blocks) through the OpenAI and Anthropic routes of a node: a
// chat completion, a call forced through the tool grammar, and a
// message, each answered in full.
func TestQwen3NextServed(t *testing.T) {
	models := t.TempDir()
	const name = "qwen35moe-demo"
	if _, err := demo.Create(filepath.Join(models, name), demo.Options{Arch: "qwen3_5_moe", Seed: 5,
		Layers: 4, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32}); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	msgs := []map[string]any{{"role": "user", "content": "hello there"}}

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
	if code := post(t, n, "/v1/chat/completions", map[string]any{"model": name, "max_tokens": 12, "messages": msgs}, &chat); code != 200 {
		t.Fatalf("chat completion: %d %+v", code, chat.Error)
	}
	if len(chat.Choices) != 1 || chat.Choices[0].Message.Content == "" || chat.Usage.CompletionTokens == 0 {
		t.Fatalf("chat completion: %+v", chat)
	}

	tool := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	chat.Choices = nil
	if code := post(t, n, "/v1/chat/completions", map[string]any{"model": name, "max_tokens": 60, "messages": msgs,
		"tools": []any{tool}, "tool_choice": "required"}, &chat); code != 200 {
		t.Fatalf("forced tool call: %d %+v", code, chat.Error)
	}
	if len(chat.Choices) != 1 || len(chat.Choices[0].Message.ToolCalls) == 0 || chat.Choices[0].Message.ToolCalls[0].Function.Name != "get_weather" {
		t.Fatalf("forced tool call: %+v", chat)
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
	if code := post(t, n, "/v1/messages", map[string]any{"model": name, "max_tokens": 12, "messages": msgs}, &msg); code != 200 {
		t.Fatalf("message: %d %+v", code, msg.Error)
	}
	if len(msg.Content) == 0 || msg.Usage.OutputTokens == 0 {
		t.Fatalf("message: %+v", msg)
	}
}
