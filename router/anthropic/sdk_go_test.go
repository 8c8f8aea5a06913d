package anthropic_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"fusion/node"
	"fusion/node/nodetest"
)

const testKey = "sk-fusion-test"

func client(n *node.Node, key string) ant.Client {
	return ant.NewClient(option.WithBaseURL(n.URL()), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func userMsg(s string) []ant.MessageParam {
	return []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock(s))}
}

func check(t *testing.T, err error) {
	t.Helper()
	var apiErr *ant.Error
	if errors.As(err, &apiErr) {
		t.Fatalf("%d: %s", apiErr.StatusCode, apiErr.RawJSON())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// post sends body with x-api-key and returns the status and the raw answer.
func post(t *testing.T, n *node.Node, path, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, n.URL()+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("anthropic-beta", "prompt-caching-2024-07-31")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func TestGoSDKCreate(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	c := client(n, testKey)
	ctx := context.Background()
	params := ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 6, Messages: userMsg("hi"),
		System: []ant.TextBlockParam{{Text: "be brief"}}}
	msg, err := c.Messages.New(ctx, params)
	check(t, err)
	if !strings.HasPrefix(msg.ID, "msg_") || msg.Role != "assistant" || msg.Model != nodetest.Model || len(msg.Content) != 1 ||
		msg.Content[0].Type != "text" || msg.StopReason != ant.StopReasonMaxTokens || msg.Usage.OutputTokens != 6 || msg.Usage.InputTokens <= 0 {
		t.Errorf("message: %s", msg.RawJSON())
	}

	count, err := c.Messages.CountTokens(ctx, ant.MessageCountTokensParams{Model: nodetest.Model, Messages: params.Messages,
		System: ant.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}})
	check(t, err)
	if got := msg.Usage.InputTokens + msg.Usage.CacheReadInputTokens + msg.Usage.CacheCreationInputTokens; count.InputTokens != got {
		t.Errorf("count_tokens %d, usage %d", count.InputTokens, got)
	}

	// A stop sequence: taken from the middle of a greedy answer, then the
	// same greedy request stops right before it.
	params.MaxTokens = 20
	greedy := option.WithJSONSet("temperature", 0)
	msg, err = c.Messages.New(ctx, params, greedy)
	check(t, err)
	text := []rune(msg.Content[0].Text)
	if len(text) < 2 {
		t.Fatalf("the demo model wrote %q: too little to test stop_sequences", string(text))
	}
	stop := string(text[len(text)/2:])
	params.StopSequences = []string{stop}
	msg, err = c.Messages.New(ctx, params, greedy)
	check(t, err)
	want := string(text)[:strings.Index(string(text), stop)]
	if msg.StopReason != ant.StopReasonStopSequence || msg.StopSequence != stop || msg.Content[0].Text != want {
		t.Errorf("stop sequence %q: %s", stop, msg.RawJSON())
	}
}

func TestGoSDKStream(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	c := client(n, testKey)
	s := c.Messages.NewStreaming(context.Background(), ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 5, Messages: userMsg("hi")})
	var msg ant.Message
	var types []string
	var text strings.Builder
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.AsAny().(ant.ContentBlockDeltaEvent); ok {
			text.WriteString(d.Delta.Text)
		}
	}
	check(t, s.Err())
	// The SDK drops pings; the demo model may write nothing.
	shape := regexp.MustCompile(`^message_start content_block_start (content_block_delta )*content_block_stop message_delta message_stop$`)
	if got := strings.Join(types, " "); !shape.MatchString(got) {
		t.Errorf("events %s", got)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != text.String() || msg.StopReason != ant.StopReasonMaxTokens || msg.Usage.OutputTokens != 5 {
		t.Errorf("final message: %+v", msg)
	}
}

// TestStreamWire checks the raw SSE: every event named, its data's type
// equal to the name.
func TestStreamWire(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	status, h, body := post(t, n, "/v1/messages", testKey, `{"model":"demo","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", status, body)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	var names []string
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
			names = append(names, name)
		case strings.HasPrefix(line, "data: "):
			var v struct{ Type string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil || v.Type != name {
				t.Errorf("event %s: data %s", name, line)
			}
			name = ""
		case line == "":
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	shape := regexp.MustCompile(`^message_start content_block_start ping (content_block_delta ){0,3}content_block_stop message_delta message_stop$`)
	if !shape.MatchString(strings.Join(names, " ")) || names[0] != "message_start" || names[len(names)-1] != "message_stop" {
		t.Errorf("events: %v", names)
	}
}

func TestGoSDKErrors(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	ctx := context.Background()
	base := ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 2, Messages: userMsg("hi")}
	tests := []struct {
		name   string
		c      ant.Client
		params ant.MessageNewParams
		status int
		typ    string
	}{
		{"unknown model", client(n, testKey), func() ant.MessageNewParams { p := base; p.Model = "nope"; return p }(), 404, "not_found_error"},
		{"bad field", client(n, testKey), func() ant.MessageNewParams { p := base; p.MaxTokens = 0; return p }(), 400, "invalid_request_error"},
		{"forced tool with an unenforceable schema", client(n, testKey), func() ant.MessageNewParams {
			p := base
			p.Tools = []ant.ToolUnionParam{{OfTool: &ant.ToolParam{Name: "t", InputSchema: ant.ToolInputSchemaParam{Properties: map[string]any{
				"s": map[string]any{"type": "string", "contentMediaType": "text/html"}}}}}}
			p.ToolChoice = ant.ToolChoiceUnionParam{OfAny: &ant.ToolChoiceAnyParam{}}
			return p
		}(), 400, "invalid_request_error"},
		{"wrong key", client(n, "sk-wrong"), base, 401, "authentication_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Messages.New(ctx, tt.params)
			var apiErr *ant.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v", err)
			}
			var body struct {
				Type  string
				Error struct{ Type, Message string }
			}
			_ = json.Unmarshal([]byte(apiErr.RawJSON()), &body)
			if apiErr.StatusCode != tt.status || body.Type != "error" || body.Error.Type != tt.typ || body.Error.Message == "" {
				t.Errorf("error = %d %s", apiErr.StatusCode, apiErr.RawJSON())
			}
		})
	}
}

func TestOverloaded(t *testing.T) {
	tight := nodetest.Start(t, nodetest.Options{MaxQueued: 1})
	c := client(tight, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := c.Messages.NewStreaming(ctx, ant.MessageNewParams{Model: nodetest.Model, MaxTokens: 4096, Messages: userMsg("go on")})
	if !s.Next() { // admitted and generating
		t.Fatal(s.Err())
	}
	status, h, body := post(t, tight, "/v1/messages", "", `{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 429 || h.Get("Retry-After") != "1" || !strings.Contains(string(body), `"type":"rate_limit_error"`) {
		t.Errorf("%d %s", status, body)
	}
	cancel()
	for s.Next() {
	}
}

// TestGoSDKStreamThinking: with thinking enabled the stream opens a
// thinking block (thinking deltas, then a signature delta), then text.
func TestGoSDKStreamThinking(t *testing.T) {
	models := nodetest.Models(t)
	nodetest.AddThinker(t, models)
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	c := client(n, testKey)
	const budget, maxTokens = 1024, 1100
	s := c.Messages.NewStreaming(context.Background(), ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: maxTokens,
		Messages: userMsg("Tell me a story"), Thinking: ant.ThinkingConfigParamOfEnabled(budget)})
	var msg ant.Message
	deltas := map[string]int{}
	var thinking strings.Builder
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.AsAny().(ant.ContentBlockDeltaEvent); ok {
			deltas[d.Delta.Type]++
			thinking.WriteString(d.Delta.Thinking)
		}
	}
	check(t, s.Err())
	if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[1].Type != "text" {
		t.Fatalf("content: %+v", msg.Content)
	}
	if msg.Content[0].Thinking == "" || msg.Content[0].Thinking != thinking.String() || msg.Content[1].Text == "" {
		t.Errorf("thinking %q (deltas %q), text %q", msg.Content[0].Thinking, thinking.String(), msg.Content[1].Text)
	}
	if deltas["signature_delta"] != 1 || deltas["thinking_delta"] == 0 || deltas["thinking_delta"] > budget || deltas["text_delta"] == 0 {
		t.Errorf("deltas %v", deltas)
	}
	if msg.StopReason != ant.StopReasonMaxTokens || msg.Usage.OutputTokens != maxTokens {
		t.Errorf("stop %s, output tokens %d", msg.StopReason, msg.Usage.OutputTokens)
	}
}

// TestCountTokensRoutes: /v1/count_tokens answers what
// /v1/messages/count_tokens does for the same body.
func TestCountTokensRoutes(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	for _, body := range []string{
		`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"demo","system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],` +
			`"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],` +
			`"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"Weather in Paris?"}]}`,
	} {
		var counts [2]int
		for i, path := range []string{"/v1/messages/count_tokens", "/v1/count_tokens"} {
			status, _, b := post(t, n, path, testKey, body)
			var v map[string]int
			if err := json.Unmarshal(b, &v); status != 200 || err != nil || len(v) != 1 || v["input_tokens"] <= 0 {
				t.Fatalf("%s: %d %s", path, status, b)
			}
			counts[i] = v["input_tokens"]
		}
		if counts[0] != counts[1] {
			t.Errorf("%s: /v1/messages/count_tokens %d, /v1/count_tokens %d", body, counts[0], counts[1])
		}
	}
}

// TestBearerAuth: with an API key, /v1/messages takes it as
// Authorization: Bearer too; a wrong or missing key is a 401 in
// Anthropic's shape.
func TestBearerAuth(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	const body = `{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct {
		name   string
		header string
		status int
	}{
		{"bearer", "Bearer " + testKey, 200},
		{"wrong bearer", "Bearer sk-wrong", 401},
		{"key prefix", "Bearer " + testKey[:6], 401},
		{"no key", "", 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/messages", strings.NewReader(body))
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if tt.status == 200 {
				var m struct {
					Type  string
					Usage struct {
						OutputTokens int `json:"output_tokens"`
					}
				}
				if err := json.Unmarshal(b, &m); err != nil || m.Type != "message" || m.Usage.OutputTokens != 2 {
					t.Errorf("answer %s", b)
				}
				return
			}
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type != "authentication_error" || e.Error.Message == "" {
				t.Errorf("error %s", b)
			}
		})
	}
}

// TestContextWindowStop: a node without a max_tokens cap takes Claude
// Code's max_tokens (32000) and lets the answer run to the model's context
// window, which stop_reason names (model_context_window_exceeded, as the
// SDK's StopReason has it), whole or streamed; a max_tokens inside the
// window still stops with max_tokens.
func TestContextWindowStop(t *testing.T) {
	const window = 64
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: nodetest.ModelsWithContext(t, window)})
	c := client(n, testKey)
	tests := []struct {
		name      string
		maxTokens int64
		stream    bool
		stop      ant.StopReason
	}{
		{"whole, cut by the window", 32000, false, ant.StopReasonModelContextWindowExceeded},
		{"streamed, cut by the window", 32000, true, ant.StopReasonModelContextWindowExceeded},
		{"whole, max_tokens", 5, false, ant.StopReasonMaxTokens},
		{"streamed, max_tokens", 5, true, ant.StopReasonMaxTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := ant.MessageNewParams{Model: nodetest.Model, MaxTokens: tt.maxTokens, Messages: userMsg("hi")}
			var msg ant.Message
			if tt.stream {
				s := c.Messages.NewStreaming(context.Background(), params)
				for s.Next() {
					if err := msg.Accumulate(s.Current()); err != nil {
						t.Fatal(err)
					}
				}
				check(t, s.Err())
			} else {
				// A set timeout lets the SDK send a large max_tokens unstreamed.
				m, err := c.Messages.New(context.Background(), params, option.WithRequestTimeout(time.Minute))
				check(t, err)
				msg = *m
			}
			u := msg.Usage
			prompt := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
			want := window - prompt
			if tt.stop == ant.StopReasonMaxTokens {
				want = tt.maxTokens
			}
			if msg.StopReason != tt.stop || u.OutputTokens != want {
				t.Errorf("stop_reason %q after %d tokens (prompt %d), want %q after %d", msg.StopReason, u.OutputTokens, prompt, tt.stop, want)
			}
		})
	}
}
