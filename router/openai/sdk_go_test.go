package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"fusion/node"
	"fusion/node/nodetest"
)

const testKey = "sk-fusion-test"

func client(n *node.Node, key string) oa.Client {
	return oa.NewClient(option.WithBaseURL(n.URL()+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// post sends a JSON body with the test key and decodes the answer.
func post(t *testing.T, n *node.Node, path string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, n.URL()+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	check(t, err)
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: decode: %v", path, err)
	}
	return resp.StatusCode
}

// eosBias bans the demo model's end tokens, so generation runs to
// max_tokens.
func eosBias(t *testing.T, n *node.Node) map[string]int64 {
	t.Helper()
	bias := map[string]int64{}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		var res struct{ Tokens []int }
		if code := post(t, n, "/tokenize", map[string]any{"model": nodetest.Model, "prompt": s, "add_special_tokens": false}, &res); code != 200 || len(res.Tokens) != 1 {
			t.Fatalf("tokenize %q: %d %v", s, code, res.Tokens)
		}
		bias[itoa(res.Tokens[0])] = -100
	}
	return bias
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// check fails the test on err, showing the server's error message (the
// SDK's Error() gives only the status).
func check(t *testing.T, err error) {
	t.Helper()
	var apiErr *oa.Error
	if errors.As(err, &apiErr) {
		t.Fatalf("%d %s: %s (param %q, code %q)", apiErr.StatusCode, apiErr.Type, apiErr.Message, apiErr.Param, apiErr.Code)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func userMsg(s string) []oa.ChatCompletionMessageParamUnion {
	return []oa.ChatCompletionMessageParamUnion{oa.UserMessage(s)}
}

func TestGoSDKChat(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	c := client(n, testKey)
	ctx := context.Background()
	bias := eosBias(t, n)

	params := oa.ChatCompletionNewParams{
		Model: nodetest.Model, Messages: userMsg("Tell me a story"),
		MaxTokens: oa.Int(6), Temperature: oa.Float(0), LogitBias: bias,
	}
	resp, err := c.Chat.Completions.New(ctx, params)
	check(t, err)
	if resp.Object != "chat.completion" || resp.Model != nodetest.Model || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Created == 0 ||
		resp.SystemFingerprint == "" || len(resp.Choices) != 1 {
		t.Fatalf("response = %+v", resp)
	}
	ch := resp.Choices[0]
	if ch.Index != 0 || ch.Message.Role != "assistant" || ch.FinishReason != "length" || ch.Message.Content == "" {
		t.Errorf("choice = %+v", ch)
	}
	u := resp.Usage
	if u.CompletionTokens != 6 || u.PromptTokens < 5 || u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("usage = %+v", u)
	}
	var raw struct {
		Usage map[string]any `json:"usage"`
	}
	if err := json.Unmarshal([]byte(resp.RawJSON()), &raw); err != nil || raw.Usage["cached_tokens"] != float64(0) {
		t.Errorf("usage.cached_tokens missing: %s", resp.RawJSON())
	}

	// Greedy decoding is deterministic.
	again, err := c.Chat.Completions.New(ctx, params)
	if err != nil || again.Choices[0].Message.Content != ch.Message.Content {
		t.Errorf("greedy rerun = %q (%v), want %q", again.Choices[0].Message.Content, err, ch.Message.Content)
	}

	t.Run("stop sequence", func(t *testing.T) {
		// Two characters from the middle of the greedy text (the first
		// pair from there that holds no U+FFFD, which a token ending
		// inside a character produces), as a stop string: the answer is
		// the text before their first occurrence.
		text := []rune(ch.Message.Content)
		var stop string
		for i := len(text) / 2; i+2 <= len(text) && stop == ""; i++ {
			if !slices.Contains(text[i:i+2], utf8.RuneError) {
				stop = string(text[i : i+2])
			}
		}
		if stop == "" {
			t.Fatalf("no usable stop string in %q", string(text))
		}
		p := params
		p.Stop = oa.ChatCompletionNewParamsStopUnion{OfString: oa.String(stop)}
		r, err := c.Chat.Completions.New(ctx, p)
		check(t, err)
		want := string(text)[:strings.Index(string(text), stop)]
		if got := r.Choices[0]; got.Message.Content != want || got.FinishReason != "stop" || r.Usage.CompletionTokens > 6 {
			t.Errorf("with stop %q: %q %s (%d tokens), want %q stop", stop, got.Message.Content, got.FinishReason, r.Usage.CompletionTokens, want)
		}
	})

	t.Run("n choices and logprobs", func(t *testing.T) {
		p := params
		p.N = oa.Int(3)
		p.Temperature = oa.Float(1)
		p.Seed = oa.Int(7)
		p.Logprobs = oa.Bool(true)
		p.TopLogprobs = oa.Int(2)
		r, err := c.Chat.Completions.New(ctx, p)
		check(t, err)
		if len(r.Choices) != 3 {
			t.Fatalf("choices = %d", len(r.Choices))
		}
		for i, ch := range r.Choices {
			if int(ch.Index) != i || len(ch.Logprobs.Content) != 6 {
				t.Errorf("choice %d: index %d, %d logprobs", i, ch.Index, len(ch.Logprobs.Content))
			}
			for _, lp := range ch.Logprobs.Content {
				if lp.Logprob > 0 || len(lp.TopLogprobs) != 2 || lp.TopLogprobs[0].Logprob < lp.TopLogprobs[1].Logprob {
					t.Errorf("logprob entry %+v", lp)
				}
			}
		}
		if r.Usage.CompletionTokens != 18 {
			t.Errorf("usage = %+v", r.Usage)
		}
	})

	t.Run("stream with usage", func(t *testing.T) {
		p := params
		p.StreamOptions = oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)}
		s := c.Chat.Completions.NewStreaming(ctx, p)
		defer s.Close()
		var acc oa.ChatCompletionAccumulator
		var chunks []oa.ChatCompletionChunk
		for s.Next() {
			chunk := s.Current()
			acc.AddChunk(chunk)
			chunks = append(chunks, chunk)
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if len(chunks) < 4 {
			t.Fatalf("%d chunks", len(chunks))
		}
		first, fin, last := chunks[0], chunks[len(chunks)-2], chunks[len(chunks)-1]
		if first.Choices[0].Delta.Role != "assistant" || first.Object != "chat.completion.chunk" || first.ID != resp.ID && first.ID == "" {
			t.Errorf("first chunk = %s", first.RawJSON())
		}
		if len(fin.Choices) != 1 || fin.Choices[0].FinishReason != "length" {
			t.Errorf("finish chunk = %s", fin.RawJSON())
		}
		if len(last.Choices) != 0 || last.Usage.CompletionTokens != 6 || last.Usage.TotalTokens != u.TotalTokens {
			t.Errorf("usage chunk = %s", last.RawJSON())
		}
		for _, ch := range chunks {
			if ch.ID != first.ID || ch.Created != first.Created || ch.Model != nodetest.Model || ch.SystemFingerprint == "" {
				t.Errorf("chunk header differs: %s", ch.RawJSON())
			}
		}
		if got := acc.Choices[0].Message.Content; got != ch.Message.Content {
			t.Errorf("streamed %q, non-streamed %q", got, ch.Message.Content)
		}
	})
}

func TestGoSDKCompletionsModelsTokenize(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	c := client(n, testKey)
	ctx := context.Background()
	bias := eosBias(t, n)

	r, err := c.Completions.New(ctx, oa.CompletionNewParams{
		Model: nodetest.Model, Prompt: oa.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"Once upon", "def main"}},
		MaxTokens: oa.Int(4), Temperature: oa.Float(0), Echo: oa.Bool(true), LogitBias: bias,
	})
	check(t, err)
	if r.Object != "text_completion" || len(r.Choices) != 2 || !strings.HasPrefix(r.Choices[0].Text, "Once upon") ||
		!strings.HasPrefix(r.Choices[1].Text, "def main") || r.Choices[1].Index != 1 || r.Choices[0].FinishReason != "length" {
		t.Fatalf("completion = %s", r.RawJSON())
	}
	if r.Usage.CompletionTokens != 8 {
		t.Errorf("usage = %+v", r.Usage)
	}

	lp, err := c.Completions.New(ctx, oa.CompletionNewParams{
		Model: nodetest.Model, Prompt: oa.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3}},
		// Greedy: a sampled token may be part of a character, and then
		// the tokens (each shown whole, as U+FFFD) would not spell the text.
		MaxTokens: oa.Int(3), Logprobs: oa.Int(2), LogitBias: bias, Temperature: oa.Float(0),
	})
	check(t, err)
	l := lp.Choices[0].Logprobs
	if len(l.Tokens) != 3 || len(l.TokenLogprobs) != 3 || len(l.TopLogprobs) != 3 || len(l.TextOffset) != 3 || l.TextOffset[0] != 0 {
		t.Errorf("logprobs = %s", lp.Choices[0].RawJSON())
	}
	if strings.Join(l.Tokens, "") != lp.Choices[0].Text {
		t.Errorf("tokens %q do not spell %q", l.Tokens, lp.Choices[0].Text)
	}

	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != nodetest.Model || models.Data[0].Object != "model" || models.Data[0].OwnedBy == "" {
		t.Fatalf("models = %+v (%v)", models, err)
	}
	m, err := c.Models.Get(ctx, nodetest.Model)
	if err != nil || m.ID != nodetest.Model || m.Created == 0 {
		t.Errorf("model = %+v (%v)", m, err)
	}

	var tok struct {
		Tokens []int  `json:"tokens"`
		Count  int    `json:"count"`
		Prompt string `json:"prompt"`
	}
	if code := post(t, n, "/tokenize", map[string]any{"model": nodetest.Model, "prompt": "Hello, world"}, &tok); code != 200 || tok.Count != len(tok.Tokens) || tok.Count == 0 {
		t.Fatalf("tokenize: %d %+v", code, tok)
	}
	var detok struct{ Prompt string }
	if code := post(t, n, "/detokenize", map[string]any{"model": nodetest.Model, "tokens": tok.Tokens}, &detok); code != 200 || detok.Prompt != "Hello, world" {
		t.Errorf("detokenize: %d %q", code, detok.Prompt)
	}
	if code := post(t, n, "/tokenize", map[string]any{"model": nodetest.Model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, &tok); code != 200 ||
		!strings.Contains(tok.Prompt, "<|im_start|>user\nhi<|im_end|>") || tok.Count != len(tok.Tokens) {
		t.Errorf("tokenize messages: %d %+v", code, tok)
	}
}

func TestGoSDKErrors(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey})
	tight := nodetest.Start(t, nodetest.Options{MaxQueued: 1})
	ctx := context.Background()
	base := oa.ChatCompletionNewParams{Model: nodetest.Model, Messages: userMsg("hi"), MaxTokens: oa.Int(2)}

	tests := []struct {
		name   string
		c      oa.Client
		params func(oa.ChatCompletionNewParams) oa.ChatCompletionNewParams
		status int
		param  string
		code   string
	}{
		{"unknown model", client(n, testKey), func(p oa.ChatCompletionNewParams) oa.ChatCompletionNewParams { p.Model = "nope"; return p },
			404, "model", "model_not_found"},
		{"bad field", client(n, testKey), func(p oa.ChatCompletionNewParams) oa.ChatCompletionNewParams { p.TopP = oa.Float(7); return p },
			400, "top_p", "invalid_value"},
		{"wrong key", client(n, "sk-wrong"), func(p oa.ChatCompletionNewParams) oa.ChatCompletionNewParams { return p },
			401, "", "invalid_api_key"},
		// n=2 on a node admitting one generation: the second is refused
		// while the first runs (long: no end token, many tokens).
		{"overloaded", client(tight, ""), func(p oa.ChatCompletionNewParams) oa.ChatCompletionNewParams {
			p.N, p.MaxTokens, p.LogitBias = oa.Int(2), oa.Int(4000), eosBias(t, tight)
			return p
		},
			429, "", "rate_limit_exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.c.Chat.Completions.New(ctx, tt.params(base))
			var apiErr *oa.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v", err)
			}
			if apiErr.StatusCode != tt.status || apiErr.Param != tt.param || apiErr.Code != tt.code || apiErr.Message == "" || apiErr.Type == "" {
				t.Errorf("error = %d %+v", apiErr.StatusCode, apiErr)
			}
		})
	}

	// A type-confused field through the SDK's escape hatch.
	c := client(n, testKey)
	_, err := c.Chat.Completions.New(ctx, base, option.WithJSONSet("temperature", "hot"))
	var apiErr *oa.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "temperature" || apiErr.Code != "invalid_type" {
		t.Errorf("type confusion: %v", err)
	}
}

func TestGoSDKCancelMidStream(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	c := client(n, "")
	bias := eosBias(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	s := c.Chat.Completions.NewStreaming(ctx, oa.ChatCompletionNewParams{
		Model: nodetest.Model, Messages: userMsg("go on forever"), MaxTokens: oa.Int(4096), LogitBias: bias,
	})
	for i := 0; i < 3 && s.Next(); i++ {
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	cancel()
	s.Close()

	var snap struct {
		Cancelled int64 `json:"cancelled_requests"`
		Active    int64 `json:"active_requests"`
		Engine    struct {
			InFlight  int64 `json:"in_flight"`
			Cancelled int64 `json:"cancelled"`
		} `json:"engine"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(n.URL() + "/metrics")
		check(t, err)
		err = json.NewDecoder(resp.Body).Decode(&snap)
		resp.Body.Close()
		check(t, err)
		if snap.Cancelled == 1 && snap.Active == 0 && snap.Engine.InFlight == 0 && snap.Engine.Cancelled == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics after cancel: %+v", snap)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := n.Runner().Stats(); st.InFlight != 0 || st.Cancelled != 1 {
		t.Errorf("runner stats = %+v", st)
	}
}

// TestGoSDKTools: a request with tools (tool_choice auto) and a tool
// round trip in its history is accepted and answered, streamed or not. The
// demo model has random weights and never calls a tool; the converters'
// tool-call output is proven by the unit tests with synthetic events.
func TestGoSDKTools(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	c := client(n, "")
	ctx := context.Background()
	bias := eosBias(t, n)
	tools := []oa.ChatCompletionToolUnionParam{oa.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: oa.String("Current weather of a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
	})}
	msgs := []oa.ChatCompletionMessageParamUnion{
		oa.UserMessage("Weather in Paris?"),
		{OfAssistant: &oa.ChatCompletionAssistantMessageParam{ToolCalls: []oa.ChatCompletionMessageToolCallUnionParam{{
			OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
				Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
		}}}},
		oa.ToolMessage("sunny, 21 C", "call_1"),
	}
	params := oa.ChatCompletionNewParams{
		Model: nodetest.Model, Messages: msgs, Tools: tools, MaxTokens: oa.Int(4), LogitBias: bias,
		ToolChoice: oa.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oa.String("auto")}, ParallelToolCalls: oa.Bool(true),
	}
	r, err := c.Chat.Completions.New(ctx, params)
	check(t, err)
	if len(r.Choices) != 1 || r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 4 {
		t.Errorf("answer: %+v", r)
	}
	// The tools are rendered into the prompt: without them it is shorter.
	noTools := params
	noTools.Tools = nil
	noTools.ToolChoice = oa.ChatCompletionToolChoiceOptionUnionParam{}
	noTools.ParallelToolCalls = oa.Bool(true)
	r2, err := c.Chat.Completions.New(ctx, noTools)
	check(t, err)
	if r.Usage.PromptTokens <= r2.Usage.PromptTokens {
		t.Errorf("prompt tokens with tools %d, without %d", r.Usage.PromptTokens, r2.Usage.PromptTokens)
	}
	s := c.Chat.Completions.NewStreaming(ctx, params)
	var acc oa.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	check(t, s.Err())
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "length" {
		t.Errorf("streamed answer: %+v", acc.ChatCompletion)
	}
}

// TestGoSDKUnenforceableSchema (issue #5): a schema keyword the grammar
// cannot enforce is refused with a 400 in the OpenAI error shape that names
// it — for response_format and for forced tool parameters, streaming or
// not — never silently ignored.
func TestGoSDKUnenforceableSchema(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	c := client(n, "")
	ctx := context.Background()
	jsonSchema := func(schema map[string]any) oa.ChatCompletionNewParamsResponseFormatUnion {
		return oa.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: schema, Strict: oa.Bool(true)}}}
	}
	tests := []struct {
		name    string
		params  oa.ChatCompletionNewParams
		keyword string
	}{
		{"response_format contentEncoding", oa.ChatCompletionNewParams{ResponseFormat: jsonSchema(map[string]any{
			"type": "object", "properties": map[string]any{"data": map[string]any{"type": "string", "contentEncoding": "base64"}}})}, "contentEncoding"},
		{"response_format fractional minimum", oa.ChatCompletionNewParams{ResponseFormat: jsonSchema(map[string]any{
			"type": "number", "minimum": 0.5})}, "minimum"},
		{"forced tool contentMediaType", oa.ChatCompletionNewParams{
			Tools: []oa.ChatCompletionToolUnionParam{oa.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "t",
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "contentMediaType": "text/html"}}}})},
			ToolChoice: oa.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oa.String("required")}}, "contentMediaType"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, stream %v", tt.name, stream), func(t *testing.T) {
				p := tt.params
				p.Model, p.Messages, p.MaxTokens = nodetest.Model, userMsg("hi"), oa.Int(8)
				var err error
				if stream {
					s := c.Chat.Completions.NewStreaming(ctx, p)
					for s.Next() {
						t.Errorf("chunk %s", s.Current().RawJSON())
					}
					err = s.Err()
				} else {
					_, err = c.Chat.Completions.New(ctx, p)
				}
				var apiErr *oa.Error
				if !errors.As(err, &apiErr) {
					t.Fatalf("err = %v, want a 400", err)
				}
				if apiErr.StatusCode != 400 || apiErr.Type != "invalid_request_error" || apiErr.Code != "invalid_value" ||
					!strings.Contains(apiErr.Message, `"`+tt.keyword+`"`) {
					t.Errorf("error = %d %s", apiErr.StatusCode, apiErr.RawJSON())
				}
			})
		}
	}
}

// TestContextWindowLength: a node without a max_tokens cap lets an answer
// with no max_tokens, or one past the window, run to the model's context
// window; OpenAI has no finish_reason of its own for that and says
// "length".
func TestContextWindowLength(t *testing.T) {
	const window = 64
	n := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: nodetest.ModelsWithContext(t, window)})
	c := client(n, testKey)
	bias := eosBias(t, n)
	for _, maxTokens := range []int64{0, 32000} {
		params := oa.ChatCompletionNewParams{Model: nodetest.Model, Messages: userMsg("hi"), Temperature: oa.Float(0), LogitBias: bias}
		if maxTokens > 0 {
			params.MaxTokens = oa.Int(maxTokens)
		}
		resp, err := c.Chat.Completions.New(context.Background(), params)
		check(t, err)
		if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "length" || resp.Usage.TotalTokens != window {
			t.Errorf("max_tokens %d: finish_reason %q, usage %+v; want length at the %d-token window", maxTokens, resp.Choices[0].FinishReason, resp.Usage, window)
		}
	}
}
