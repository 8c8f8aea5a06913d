package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	ant "github.com/anthropics/anthropic-sdk-go/v2"

	"fusion/engine/demo"
	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// thinkingParams asks the thinker for an answer that starts with a
// thinking block (display as given). The thinker writes visible thinking
// when it samples (greedy, it closes its <think> block at once).
func thinkingParams(display ant.ThinkingConfigEnabledDisplay) ant.MessageNewParams {
	return ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: 1040, Messages: userMsg("Weather in Paris?"),
		Thinking: ant.ThinkingConfigParamUnion{OfEnabled: &ant.ThinkingConfigEnabledParam{BudgetTokens: 1024, Display: display}}}
}

// qwenTemplated is a demo model with Qwen3's real tokenizer and chat
// template, which renders an assistant turn's reasoning_content when the
// turn follows the last user query (the demo models' template drops it).
const qwenTemplated = "qwen3-template"

// thinkingNode starts a node with the demo model, the thinker and the
// Qwen3-templated model, and returns a client of it.
func thinkingNode(t *testing.T) ant.Client {
	t.Helper()
	models := nodetest.Models(t)
	nodetest.AddThinker(t, models)
	if _, err := demo.Create(filepath.Join(models, qwenTemplated), demo.Options{VocabFrom: testenv.TokenizerDir(t, "qwen3"),
		Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64}); err != nil {
		t.Fatal(err)
	}
	return client(nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models}), testKey)
}

// toolTurn is a history in which the assistant thought, then called a
// tool, for the Qwen3-templated model: where agents (Claude Code) send
// thinking blocks back, and where Qwen3's template renders them.
func toolTurn(thinking ...ant.ContentBlockParamUnion) ant.MessageCountTokensParams {
	blocks := append(thinking, ant.NewToolUseBlock("toolu_1", map[string]any{"city": "Paris"}, "get_weather"))
	return ant.MessageCountTokensParams{Model: qwenTemplated, Messages: []ant.MessageParam{
		ant.NewUserMessage(ant.NewTextBlock("Weather in Paris?")),
		ant.NewAssistantMessage(blocks...),
		ant.NewUserMessage(ant.NewToolResultBlock("toolu_1", "sunny", false)),
	}}
}

func countTokens(t *testing.T, c ant.Client, p ant.MessageCountTokensParams) (int64, error) {
	t.Helper()
	r, err := c.Messages.CountTokens(context.Background(), p)
	if err != nil {
		return 0, err
	}
	return r.InputTokens, nil
}

// streamThinking streams params and returns the accumulated message and
// the events as "type" or "type:delta type".
func streamThinking(t *testing.T, c ant.Client, params ant.MessageNewParams) (ant.Message, []string, string) {
	t.Helper()
	s := c.Messages.NewStreaming(context.Background(), params)
	var msg ant.Message
	var evs []string
	var streamedSig string
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		name := ev.Type
		switch e := ev.AsAny().(type) {
		case ant.ContentBlockDeltaEvent:
			name += ":" + e.Delta.Type
			if e.Delta.Type == "signature_delta" {
				streamedSig = e.Delta.Signature
			}
		case ant.ContentBlockStartEvent:
			name += ":" + e.ContentBlock.Type
		}
		evs = append(evs, name)
	}
	check(t, s.Err())
	return msg, evs, streamedSig
}

// compact folds runs of the same event into one "+".
func compact(evs []string) string {
	var out []string
	for i, e := range evs {
		if i > 0 && evs[i-1] == e {
			if !strings.HasSuffix(out[len(out)-1], "+") {
				out[len(out)-1] += "+"
			}
			continue
		}
		out = append(out, e)
	}
	return strings.Join(out, " ")
}

// TestGoSDKThinkingSignature: thinking blocks, streamed or not, carry a
// signature (a signature_delta right before the block's
// content_block_stop) that the node takes back: the block's reasoning
// reaches the next turn's prompt, an edited block is a 400
// invalid_request_error. The official Go SDK is the client.
func TestGoSDKThinkingSignature(t *testing.T) {
	c := thinkingNode(t)
	ctx := context.Background()

	msg, err := c.Messages.New(ctx, thinkingParams(""))
	check(t, err)
	if len(msg.Content) < 1 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking == "" || msg.Content[0].Signature == "" {
		t.Fatalf("content: %s", msg.RawJSON())
	}
	block := msg.Content[0]

	streamed, evs, streamedSig := streamThinking(t, c, thinkingParams(""))
	want := "message_start content_block_start:thinking content_block_delta:thinking_delta+ content_block_delta:signature_delta content_block_stop " +
		"content_block_start:text"
	if got := compact(evs); !strings.HasPrefix(got, want) {
		t.Errorf("events\n got %s\nwant %s ...", got, want)
	}
	if len(streamed.Content) < 1 || streamed.Content[0].Type != "thinking" || streamed.Content[0].Thinking == "" || streamed.Content[0].Signature != streamedSig {
		t.Fatalf("streamed content %+v, signature_delta %q", streamed.Content, streamedSig)
	}

	without, err := countTokens(t, c, toolTurn())
	check(t, err)
	for _, b := range []ant.ContentBlockUnion{block, streamed.Content[0]} {
		with, err := countTokens(t, c, toolTurn(ant.NewThinkingBlock(b.Signature, b.Thinking)))
		check(t, err)
		if with <= without {
			t.Errorf("the thinking block did not reach the prompt: %d tokens with it, %d without", with, without)
		}
	}
	p := toolTurn(ant.NewThinkingBlock(block.Signature, block.Thinking))
	_, err = c.Messages.New(ctx, ant.MessageNewParams{Model: p.Model, MaxTokens: 2, Messages: p.Messages})
	check(t, err)

	for _, tt := range []struct {
		name  string
		block ant.ContentBlockParamUnion
		msg   string
	}{
		{"edited", ant.NewThinkingBlock(block.Signature, block.Thinking+" And I lied."), "Invalid `signature` in `thinking` block"},
		{"unsigned", ant.NewThinkingBlock("", block.Thinking), "Invalid `signature` in `thinking` block"},
		{"foreign redacted_thinking", ant.NewRedactedThinkingBlock("EmwKAhgBEgy3va3pzix"), "Invalid `data` in `redacted_thinking` block"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := toolTurn(tt.block)
			for _, call := range []func() error{
				func() error {
					_, err := c.Messages.New(ctx, ant.MessageNewParams{Model: p.Model, MaxTokens: 2, Messages: p.Messages})
					return err
				},
				func() error { _, err := countTokens(t, c, p); return err },
			} {
				var apiErr *ant.Error
				if err := call(); !errors.As(err, &apiErr) {
					t.Fatalf("err = %v", err)
				}
				var body struct {
					Type  string
					Error struct{ Type, Message string }
				}
				_ = json.Unmarshal([]byte(apiErr.RawJSON()), &body)
				if apiErr.StatusCode != 400 || body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, tt.msg) {
					t.Errorf("%d %s", apiErr.StatusCode, apiErr.RawJSON())
				}
			}
		})
	}
}

// TestGoSDKThinkingOmitted: display "omitted" answers thinking blocks with
// no text and no thinking_delta, only a signature, which seals the
// reasoning: sent back (as the empty thinking block or as a
// redacted_thinking block's data), the reasoning is in the prompt again.
func TestGoSDKThinkingOmitted(t *testing.T) {
	c := thinkingNode(t)

	msg, evs, sig := streamThinking(t, c, thinkingParams(ant.ThinkingConfigEnabledDisplayOmitted))
	want := "message_start content_block_start:thinking content_block_delta:signature_delta content_block_stop content_block_start:text"
	if got := compact(evs); !strings.HasPrefix(got, want) {
		t.Errorf("events\n got %s\nwant %s ...", got, want)
	}
	if len(msg.Content) < 1 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != "" || sig == "" || msg.Content[0].Signature != sig {
		t.Fatalf("content: %+v", msg.Content)
	}
	omitted, err := countTokens(t, c, toolTurn(ant.NewThinkingBlock(sig, "")))
	check(t, err)
	redacted, err := countTokens(t, c, toolTurn(ant.NewRedactedThinkingBlock(sig)))
	check(t, err)
	without, err := countTokens(t, c, toolTurn())
	check(t, err)
	if omitted <= without || redacted != omitted {
		t.Errorf("prompt tokens: omitted block %d, as redacted_thinking %d, none %d", omitted, redacted, without)
	}
	// The non-streamed answer has the same shape.
	m, err := c.Messages.New(context.Background(), thinkingParams(ant.ThinkingConfigEnabledDisplayOmitted))
	check(t, err)
	if len(m.Content) < 1 || m.Content[0].Type != "thinking" || m.Content[0].Thinking != "" || m.Content[0].Signature == "" {
		t.Fatalf("content: %s", m.RawJSON())
	}
	if n, err := countTokens(t, c, toolTurn(ant.NewThinkingBlock(m.Content[0].Signature, ""))); err != nil || n <= without {
		t.Errorf("prompt tokens with the block: %d, %v; without %d", n, err, without)
	}
}
