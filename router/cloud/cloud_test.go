package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/sample"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, doc, field string // field: "" when valid
	}{
		{"ok", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://api.openai.com/v1","api_key_env":"OPENAI_API_KEY","models":{"gpt":"gpt-5"}}]}`, ""},
		{"default", `{"upstreams":[{"name":"an","kind":"anthropic","base_url":"http://127.0.0.1:9/v1","api_key_file":"/k","default":true,"timeout_seconds":5}]}`, ""},
		{"empty", `{"upstreams":[]}`, ""},
		{"key in doc", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1","api_key":"sk-1","default":true}]}`, "upstreams[0].api_key"},
		{"unknown", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1","default":true,"color":1}]}`, "upstreams[0].color"},
		{"top unknown", `{"upstreams":[],"x":1}`, "x"},
		{"kind", `{"upstreams":[{"name":"oa","kind":"gemini","base_url":"https://x/v1","default":true}]}`, "upstreams[0].kind"},
		{"url", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"ftp://x","default":true}]}`, "upstreams[0].base_url"},
		{"url creds", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://u:p@x/v1","default":true}]}`, "upstreams[0].base_url"},
		{"both keys", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1","default":true,"api_key_env":"A","api_key_file":"/f"}]}`, "upstreams[0].api_key_env"},
		{"dup", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1","default":true},{"name":"oa","kind":"openai","base_url":"https://x/v1","default":true}]}`, "upstreams[1].name"},
		{"no models", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1"}]}`, "upstreams[0].models"},
		{"timeout", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1","default":true,"timeout_seconds":-1}]}`, "upstreams[0].timeout_seconds"},
		{"type", `{"upstreams":[{"name":"oa","kind":"openai","base_url":"https://x/v1","default":"yes"}]}`, "upstreams.default"},
		{"not object", `[1]`, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			var ce *ConfigError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("err %v", err)
			case tt.field != "" && (!errors.As(err, &ce) || ce.Field != tt.field):
				t.Fatalf("err %v, want field %s", err, tt.field)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	cfg := Config{Upstreams: []Upstream{
		{Name: "a", Models: map[string]string{"m1": "up-1"}},
		{Name: "b", Default: true, Models: map[string]string{"m2": "up-2"}},
		{Name: "c", Models: map[string]string{"m1": "other"}},
	}}
	for model, want := range map[string][2]string{"m1": {"a", "up-1"}, "m2": {"b", "up-2"}, "m3": {"b", "m3"}} {
		r, ok := cfg.Route(model)
		if !ok || r.Upstream.Name != want[0] || r.Model != want[1] {
			t.Errorf("%s → %s %s %v, want %v", model, r.Upstream.Name, r.Model, ok, want)
		}
	}
	if _, ok := (Config{Upstreams: cfg.Upstreams[:1]}).Route("m3"); ok {
		t.Error("m3 routed without a default upstream")
	}
}

func TestKeyNeverInErrors(t *testing.T) {
	s := Secrets{Getenv: func(string) string { return "" }, ReadFile: func(string) ([]byte, error) { return []byte("  \n"), nil }}
	for _, u := range []Upstream{{Name: "e", APIKeyEnv: "SOME_KEY"}, {Name: "f", APIKeyFile: "/run/key"}} {
		_, err := s.Key(u)
		if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), strings.TrimPrefix(strings.TrimPrefix(u.KeySource(), "env:"), "file:")) {
			t.Errorf("%s: %v", u.Name, err)
		}
	}
	s.Getenv = func(string) string { return " sk-secret-1234 " }
	if k, err := s.Key(Upstream{APIKeyEnv: "K"}); err != nil || k != "sk-secret-1234" {
		t.Errorf("key %q %v", k, err)
	}
	if got := redact("Incorrect API key provided: sk-secret-1234.", "sk-secret-1234"); strings.Contains(got, "sk-secret") {
		t.Errorf("redact: %s", got)
	}
}

// conversation is a neutral request with a system prompt, a tool call and
// its result, as both dialects produce.
func conversation() *engine.Request {
	call := chattemplate.NewObject("id", "call_1", "type", "function",
		"function", chattemplate.NewObject("name", "get_weather", "arguments", chattemplate.NewObject("city", "Paris")))
	params := chattemplate.NewObject("type", "object", "properties", chattemplate.NewObject("city", chattemplate.NewObject("type", "string")))
	seed := int64(7)
	p := sample.DefaultParams()
	p.Temperature, p.TopK, p.Seed = 0.5, 20, &seed
	return &engine.Request{Model: "m", MaxTokens: 64, Stop: []string{"END"}, Sampling: p,
		Messages: []*chattemplate.Object{
			chattemplate.NewObject("role", "system", "content", "Be brief."),
			chattemplate.NewObject("role", "user", "content", "Weather?"),
			chattemplate.NewObject("role", "assistant", "content", "", "reasoning_content", "hmm", "tool_calls", []any{call}),
			chattemplate.NewObject("role", "tool", "tool_call_id", "call_1", "content", "22C"),
		},
		Tools: []*chattemplate.Object{chattemplate.NewObject("type", "function",
			"function", chattemplate.NewObject("name", "get_weather", "description", "Weather of a city", "parameters", params))},
		ToolChoice: engine.ToolChoice{Mode: engine.ToolNamed, Name: "get_weather", NoParallel: true},
	}
}

func TestOpenAIBody(t *testing.T) {
	b, err := openAIBody(conversation(), "up-model")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_tokens":64,"messages":[{"content":"Be brief.","role":"system"},{"content":"Weather?","role":"user"},` +
		`{"content":"","role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"id":"call_1","type":"function"}]},` +
		`{"content":"22C","role":"tool","tool_call_id":"call_1"}],"model":"up-model","parallel_tool_calls":false,"seed":7,"stop":["END"],` +
		`"stream":true,"stream_options":{"include_usage":true},"temperature":0.5,` +
		`"tool_choice":{"function":{"name":"get_weather"},"type":"function"},` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"top_k":20}`
	if string(b) != want {
		t.Errorf("body\n%s\nwant\n%s", b, want)
	}
}

func TestAnthropicBody(t *testing.T) {
	b, err := anthropicBody(conversation(), "claude-x")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_tokens":64,"messages":[{"content":[{"text":"Weather?","type":"text"}],"role":"user"},` +
		`{"content":[{"id":"call_1","input":{"city":"Paris"},"name":"get_weather","type":"tool_use"}],"role":"assistant"},` +
		`{"content":[{"content":"22C","tool_use_id":"call_1","type":"tool_result"}],"role":"user"}],"model":"claude-x","stop_sequences":["END"],` +
		`"stream":true,"system":"Be brief.","temperature":0.5,"tool_choice":{"disable_parallel_tool_use":true,"name":"get_weather","type":"tool"},` +
		`"tools":[{"description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"name":"get_weather"}],"top_k":20}`
	if string(b) != want {
		t.Errorf("body\n%s\nwant\n%s", b, want)
	}
	r := conversation()
	r.ResponseFormat = &engine.ResponseFormat{}
	if _, err := anthropicBody(r, "x"); err == nil {
		t.Error("response_format to an Anthropic upstream: no error")
	}
}

// feed runs a decoder over SSE events (name, data) and returns what it
// made.
func feed(t *testing.T, d decoder, events [][2]string) ([]engine.Event, error) {
	t.Helper()
	var out []engine.Event
	for _, e := range events {
		evs, done, err := d.event(e[0], []byte(e[1]))
		out = append(out, evs...)
		if err != nil || done {
			return out, err
		}
	}
	evs, err := d.end()
	return append(out, evs...), err
}

func TestDecoders(t *testing.T) {
	tests := []struct {
		name   string
		dec    decoder
		events [][2]string
		text   string
		calls  string // name(args) of each call
		finish engine.FinishReason
		usage  engine.Usage
		err    bool
	}{
		{name: "openai text", dec: &openAIDecoder{}, events: [][2]string{
			{"", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`},
			{"", `{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`},
			{"", `{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}`},
			{"", `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`},
			{"", `[DONE]`}}, text: "Hello", finish: engine.FinishLength, usage: engine.Usage{PromptTokens: 5, CompletionTokens: 2, CachedTokens: 3}},
		{name: "openai tools", dec: &openAIDecoder{}, events: [][2]string{
			{"", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{\"a\""}}]}}]}`},
			{"", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`},
			{"", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"g","arguments":""}}]},"finish_reason":"tool_calls"}]}`}},
			calls: `f({"a":1})g({})`, finish: engine.FinishToolCalls},
		{name: "openai cut", dec: &openAIDecoder{}, events: [][2]string{{"", `{"choices":[{"index":0,"delta":{"content":"x"}}]}`}}, text: "x", err: true},
		{name: "openai error", dec: &openAIDecoder{}, events: [][2]string{{"", `{"error":{"message":"boom"}}`}}, err: true},
		{name: "anthropic", dec: &anthropicDecoder{}, events: [][2]string{
			{"message_start", `{"type":"message_start","message":{"usage":{"input_tokens":4,"cache_read_input_tokens":6,"output_tokens":1}}}`},
			{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}`},
			{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"2}"}}`},
			{"content_block_stop", `{"type":"content_block_stop","index":2}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`},
			{"message_stop", `{"type":"message_stop"}`}},
			text: "Hi", calls: `f({"a":2})`, finish: engine.FinishToolCalls, usage: engine.Usage{PromptTokens: 10, CompletionTokens: 9, CachedTokens: 6}},
		{name: "anthropic error", dec: &anthropicDecoder{}, events: [][2]string{{"error", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`}}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := feed(t, tt.dec, tt.events)
			if tt.err {
				if !errors.Is(err, engine.ErrUpstream) {
					t.Fatalf("err %v, want ErrUpstream", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var text, calls strings.Builder
			for _, ev := range evs[:len(evs)-1] {
				text.WriteString(ev.Text)
				for _, c := range ev.ToolCalls {
					calls.WriteString(c.Name + "(" + c.Arguments + ")")
				}
			}
			last := evs[len(evs)-1]
			if text.String() != tt.text || calls.String() != tt.calls || !last.Done || last.FinishReason != tt.finish || last.Usage != tt.usage {
				raw, _ := json.Marshal(evs)
				t.Errorf("text %q calls %q last %+v\n%s", text.String(), calls.String(), last, raw)
			}
		})
	}
}

// TestClientErrors: the error paths of a call against a local HTTP server
// that misbehaves on purpose (the real upstreams are in node's
// TestCloudUpstreams): no answer in time and silence mid-stream (502
// naming the timeout), a 5xx (502), a 4xx that echoes the key (passed
// back, the key redacted), the key not readable here.
func TestClientErrors(t *testing.T) {
	const key = "sk-test-echo-5e1f"
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow/chat/completions":
			select {
			case <-stall:
			case <-r.Context().Done():
			}
		case "/silent/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-stall:
			case <-r.Context().Done():
			}
		case "/broken/chat/completions":
			http.Error(w, `{"error":{"message":"internal trouble"}}`, http.StatusInternalServerError)
		case "/echo/chat/completions":
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":"Incorrect API key provided: %s"}}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		}
	}))
	defer srv.Close()
	defer close(stall) // before the server's Close, which waits for its handlers
	var logs strings.Builder
	var mu sync.Mutex
	c := New(Options{Secrets: Secrets{Getenv: func(name string) string {
		if name == "KEY" {
			return key
		}
		return ""
	}}, Logger: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))})
	up := func(name, env string) Upstream {
		return Upstream{Name: name, Kind: KindOpenAI, BaseURL: srv.URL + "/" + name, APIKeyEnv: env, TimeoutSeconds: 1, Models: map[string]string{name: "m"}}
	}
	c.SetConfig(Config{Upstreams: []Upstream{up("slow", "KEY"), up("silent", "KEY"), up("broken", "KEY"), up("echo", "KEY"), up("nokey", "UNSET")}})
	msgs := []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", "hi")}
	tests := []struct {
		model  string
		status int    // 0: engine.ErrUpstream (502)
		want   string // in the error
		inEv   bool   // the error comes as an event
	}{
		{"slow", 0, "no answer within 1s", false},
		{"silent", 0, "went silent for 1s", true},
		{"broken", 0, "answered 500: internal trouble", false},
		{"echo", 401, "Incorrect API key provided: [redacted]", false},
		{"nokey", 0, "environment variable UNSET is unset", false},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			ch, err := c.Generate(context.Background(), &engine.Request{Model: tt.model, Messages: msgs})
			if tt.inEv {
				if err != nil {
					t.Fatal(err)
				}
				var last engine.Event
				for ev := range ch {
					last = ev
				}
				err = last.Err
			}
			var ue *engine.UpstreamError
			switch {
			case tt.status == 0 && !errors.Is(err, engine.ErrUpstream),
				tt.status != 0 && (!errors.As(err, &ue) || ue.Status != tt.status),
				err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), key):
				t.Errorf("err %v, want %d with %q", err, tt.status, tt.want)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), key) || !strings.Contains(logs.String(), "cloud upstream") {
		t.Errorf("logs:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
