package openai

import (
	"math"
	"strings"
	"testing"

	"fusion/engine"
	"fusion/router/wire"
)

var testMeta = meta{ID: "chatcmpl-x", Created: 100, Model: "m", SystemFingerprint: "fp"}

type ev struct {
	i int
	e engine.Event
}

func tok(id int, text string, lp float64) engine.TokenLogprob {
	return engine.TokenLogprob{ID: id, Text: text, Logprob: lp}
}

func streamChat(p *plan, events []ev) []string {
	s := newChatStream(testMeta, p)
	var out []string
	add := func(cs []ChatChunk) {
		for _, c := range cs {
			b, err := wire.Marshal(c)
			if err != nil {
				panic(err)
			}
			out = append(out, string(b))
		}
	}
	add(s.start())
	for _, e := range events {
		add(s.event(e.i, e.e))
	}
	add(s.end())
	return out
}

func chatPlan(n int, includeUsage, logprobs bool) *plan {
	p := &plan{stream: true, includeUsage: includeUsage, logprobs: logprobs, promptOf: make([]int, n)}
	for range n {
		p.reqs = append(p.reqs, &engine.Request{})
	}
	return p
}

const head = `{"id":"chatcmpl-x","object":"chat.completion.chunk","created":100,"model":"m","system_fingerprint":"fp",`

func TestChatStreamChunks(t *testing.T) {
	usage := engine.Usage{PromptTokens: 5, CompletionTokens: 2, CachedTokens: 1}
	tests := []struct {
		name   string
		plan   *plan
		events []ev
		want   []string
	}{
		{
			name: "include_usage: usage null on every chunk, then a usage chunk with no choices",
			plan: chatPlan(1, true, false),
			events: []ev{
				{0, engine.Event{Text: "Hel", Tokens: []engine.TokenLogprob{tok(1, "Hel", -1)}}},
				{0, engine.Event{Text: "lo", Tokens: []engine.TokenLogprob{tok(2, "lo", -2)}, Done: true, FinishReason: engine.FinishStop, Usage: usage}},
			},
			want: []string{
				head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{"content":"lo"},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
				head + `"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":1}}`,
			},
		},
		{
			name: "without include_usage: the finish chunk carries the usage (as the contract shows)",
			plan: chatPlan(1, false, false),
			events: []ev{
				{0, engine.Event{Text: "a"}},
				{0, engine.Event{Done: true, FinishReason: engine.FinishLength, Usage: usage}},
			},
			want: []string{
				head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
				head + `"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null}]}`,
				head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":1}}`,
			},
		},
		{
			name: "n=2 interleaved: indices kept, prompt counted once, usage after both finish",
			plan: chatPlan(2, true, false),
			events: []ev{
				{1, engine.Event{Text: "B"}},
				{0, engine.Event{Text: "A"}},
				{1, engine.Event{Done: true, FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 1}}},
				{0, engine.Event{Done: true, FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 5, CompletionTokens: 3}}},
			},
			want: []string{
				head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":1,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":1,"delta":{"content":"B"},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{"content":"A"},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":1,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":null}`,
				head + `"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`,
			},
		},
		{
			name: "logprobs on content chunks; text on the final event comes before the finish chunk",
			plan: chatPlan(1, true, true),
			events: []ev{
				{0, engine.Event{Text: "Hi", Tokens: []engine.TokenLogprob{tok(7, "Hi", -0.5)},
					TopLogprobs: [][]engine.TokenLogprob{{tok(7, "Hi", -0.5), tok(8, "Ho", math.Inf(-1))}},
					Done:        true, FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 1, CompletionTokens: 1}}},
			},
			want: []string{
				head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.5,"bytes":[72,105]},{"token":"Ho","logprob":-9999,"bytes":[72,111]}]}],"refusal":null},"finish_reason":null}],"usage":null}`,
				head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
				head + `"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := streamChat(tt.plan, tt.events)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d chunks, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("chunk %d:\n got %s\nwant %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestChatCollector(t *testing.T) {
	p := chatPlan(2, false, true)
	p.stream = false
	c := newChatCollector(testMeta, p)
	c.add(0, engine.Event{Text: "Hel", Tokens: []engine.TokenLogprob{tok(1, "Hel", -1)}})
	c.add(1, engine.Event{Text: "X", Tokens: []engine.TokenLogprob{tok(3, "X", -3)}, Done: true, FinishReason: engine.FinishLength,
		Usage: engine.Usage{PromptTokens: 4, CompletionTokens: 1}})
	c.add(0, engine.Event{Text: "lo", Tokens: []engine.TokenLogprob{tok(2, "lo", -2)}, Done: true, FinishReason: engine.FinishStop,
		Usage: engine.Usage{PromptTokens: 4, CompletionTokens: 2}})
	b, err := wire.Marshal(c.result())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"chatcmpl-x","object":"chat.completion","created":100,"model":"m","system_fingerprint":"fp","choices":[` +
		`{"index":0,"message":{"role":"assistant","content":"Hello","refusal":null,"tool_calls":null},"logprobs":{"content":[` +
		`{"token":"Hel","logprob":-1,"bytes":[72,101,108],"top_logprobs":[]},{"token":"lo","logprob":-2,"bytes":[108,111],"top_logprobs":[]}],"refusal":null},"finish_reason":"stop"},` +
		`{"index":1,"message":{"role":"assistant","content":"X","refusal":null,"tool_calls":null},"logprobs":{"content":[` +
		`{"token":"X","logprob":-3,"bytes":[88],"top_logprobs":[]}],"refusal":null},"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestCompletionEncoder(t *testing.T) {
	cm := meta{ID: "cmpl-x", Created: 100, Model: "m", SystemFingerprint: "fp"}
	const chead = `{"id":"cmpl-x","object":"text_completion","created":100,"model":"m","system_fingerprint":"fp",`
	t.Run("two prompts, echo, non-streamed", func(t *testing.T) {
		p := &plan{reqs: make([]*engine.Request, 2), promptOf: []int{0, 1}}
		e := newCompletionEncoder(cm, p, []string{"A:", "B:"})
		e.add(0, engine.Event{Text: " x", Done: true, FinishReason: engine.FinishLength, Usage: engine.Usage{PromptTokens: 2, CompletionTokens: 1}})
		e.add(1, engine.Event{Text: " y", Done: true, FinishReason: engine.FinishStop, Usage: engine.Usage{PromptTokens: 3, CompletionTokens: 1}})
		b, _ := wire.Marshal(e.result())
		want := chead + `"choices":[{"text":"A: x","index":0,"logprobs":null,"finish_reason":"length"},{"text":"B: y","index":1,"logprobs":null,"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`
		if string(b) != want {
			t.Errorf("got  %s\nwant %s", b, want)
		}
	})
	t.Run("legacy logprobs, streamed", func(t *testing.T) {
		p := &plan{reqs: make([]*engine.Request, 1), promptOf: []int{0}, stream: true, includeUsage: true, logprobs: true, topLogprobs: 1}
		e := newCompletionEncoder(cm, p, nil)
		var got []string
		add := func(cs []Completion) {
			for _, c := range cs {
				b, _ := wire.Marshal(c)
				got = append(got, string(b))
			}
		}
		add(e.start())
		add(e.event(0, engine.Event{Text: "ab", Tokens: []engine.TokenLogprob{tok(1, "a", -1), tok(2, "b", -2)},
			TopLogprobs: [][]engine.TokenLogprob{{tok(1, "a", -1)}, {tok(3, "c", -0.5)}}}))
		add(e.event(0, engine.Event{Text: "é", Tokens: []engine.TokenLogprob{tok(4, "é", -0.25)}, Done: true, FinishReason: engine.FinishStop,
			Usage: engine.Usage{PromptTokens: 2, CompletionTokens: 3}}))
		add(e.end())
		want := []string{
			chead + `"choices":[{"text":"ab","index":0,"logprobs":{"tokens":["a","b"],"token_logprobs":[-1,-2],"top_logprobs":[{"a":-1},{"c":-0.5}],"text_offset":[0,1]},"finish_reason":null}],"usage":null}`,
			chead + `"choices":[{"text":"é","index":0,"logprobs":{"tokens":["é"],"token_logprobs":[-0.25],"top_logprobs":[{}],"text_offset":[2]},"finish_reason":null}],"usage":null}`,
			chead + `"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
			chead + `"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0},"cached_tokens":0}}`,
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

func TestHumanReadableErrors(t *testing.T) {
	var req ChatRequest
	e := decodeJSON([]byte(`{"model":"m","temperature":"hot"}`), &req)
	if e == nil || e.Message != "Invalid type for 'temperature': expected a number, but got a string instead." {
		t.Errorf("message = %v", e)
	}
	e = decodeJSON([]byte(`{"model":"m","max_tokens":1e400}`), &req)
	if e == nil || e.Param != "max_tokens" {
		t.Errorf("overflow: %v", e)
	}
}
