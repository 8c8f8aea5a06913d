package router_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router"
)

const key = "sk-router-test"

// httpClient reuses connections (the fuzz target sends many requests) and
// turns a hung request into a failure.
var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

func do(t *testing.T, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s %q: %v", method, url, body, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// apiError checks that b is an error in the OpenAI shape and returns it.
func apiError(t *testing.T, b []byte) (msg, typ string, param, code any) {
	t.Helper()
	var e struct {
		Error *struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Param   any     `json:"param"`
			Code    any     `json:"code"`
		} `json:"error"`
	}
	var keys map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Message == nil || e.Error.Type == nil ||
		json.Unmarshal(b, &keys) != nil || len(keys) != 1 || len(keys["error"]) != 4 {
		t.Fatalf("not an OpenAI error: %s", b)
	}
	if *e.Error.Message == "" || *e.Error.Type == "" {
		t.Fatalf("empty message or type: %s", b)
	}
	return *e.Error.Message, *e.Error.Type, e.Error.Param, e.Error.Code
}

func TestAuth(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: key})
	tests := []struct {
		name, method, path string
		header             map[string]string
		status             int
	}{
		{"health is open", "GET", "/health", nil, 200},
		{"models without key", "GET", "/v1/models", nil, 401},
		{"models with bearer", "GET", "/v1/models", map[string]string{"Authorization": "Bearer " + key}, 200},
		{"bearer is case-insensitive", "GET", "/v1/models", map[string]string{"Authorization": "bearer " + key}, 200},
		{"models with x-api-key", "GET", "/v1/models", map[string]string{"x-api-key": key}, 200},
		{"wrong key", "GET", "/v1/models", map[string]string{"Authorization": "Bearer sk-other"}, 401},
		{"key prefix", "GET", "/v1/models", map[string]string{"Authorization": "Bearer " + key[:5]}, 401},
		{"basic scheme", "GET", "/v1/models", map[string]string{"Authorization": "Basic " + key}, 401},
		{"metrics needs key", "GET", "/metrics", nil, 401},
		{"tokenize needs key", "POST", "/tokenize", nil, 401},
		{"detokenize needs key", "POST", "/detokenize", nil, 401},
		{"chat needs key", "POST", "/v1/chat/completions", nil, 401},
		{"completions needs key", "POST", "/v1/completions", nil, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := do(t, tt.method, n.URL()+tt.path, "", tt.header)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.status == 401 {
				if _, typ, _, code := apiError(t, b); typ != "invalid_request_error" || code != "invalid_api_key" {
					t.Errorf("401 body: %s", b)
				}
			}
		})
	}
}

func TestMiddleware(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{MaxBodyBytes: 1024})

	t.Run("request id is echoed or made", func(t *testing.T) {
		resp, _ := do(t, "GET", n.URL()+"/health", "", map[string]string{"X-Request-Id": "abc-123"})
		if got := resp.Header.Get("X-Request-Id"); got != "abc-123" {
			t.Errorf("X-Request-Id = %q", got)
		}
		resp, _ = do(t, "GET", n.URL()+"/health", "", map[string]string{"X-Request-Id": strings.Repeat("x", 200)})
		if got := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
			t.Errorf("X-Request-Id = %q", got)
		}
	})

	t.Run("413 by content length and by reading", func(t *testing.T) {
		big := `{"model":"demo","prompt":"` + strings.Repeat("x", 2000) + `"}`
		resp, b := do(t, "POST", n.URL()+"/v1/completions", big, nil)
		if resp.StatusCode != 413 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		apiError(t, b)
		// Chunked: no Content-Length, the limit trips while decoding.
		req, _ := http.NewRequest("POST", n.URL()+"/v1/completions", io.MultiReader(strings.NewReader(big)))
		req.ContentLength = -1
		r2, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(r2.Body)
		r2.Body.Close()
		if r2.StatusCode != 413 {
			t.Fatalf("chunked status %d: %s", r2.StatusCode, b)
		}
		if _, _, _, code := apiError(t, b); code != "request_too_large" {
			t.Errorf("code = %v", code)
		}
	})

	t.Run("404 and 405 in the OpenAI shape", func(t *testing.T) {
		resp, b := do(t, "GET", n.URL()+"/v1/nothing", "", nil)
		if resp.StatusCode != 404 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		apiError(t, b)
		resp, b = do(t, "GET", n.URL()+"/v1/chat/completions", "", nil)
		if resp.StatusCode != 405 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if msg, _, _, _ := apiError(t, b); !strings.Contains(msg, "GET /v1/chat/completions") {
			t.Errorf("message %q", msg)
		}
		resp, b = do(t, "GET", n.URL()+"/v1/models/nope", "", nil)
		if _, _, param, code := apiError(t, b); resp.StatusCode != 404 || code != "model_not_found" || param != "model" {
			t.Errorf("unknown model: %d %s", resp.StatusCode, b)
		}
	})
}

// anthropicError checks that b is an error in Anthropic's shape and
// returns its type.
func anthropicError(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("not an Anthropic error: %s", b)
	}
	return e.Error.Type
}

// TestAnthropicRouteErrors: 404, 405 and 413 on the Anthropic routes (or
// with anthropic-version) take Anthropic's shape.
func TestAnthropicRouteErrors(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{MaxBodyBytes: 1024})
	big := `{"model":"demo","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		typ                      string
	}{
		{"413 by content length", "POST", "/v1/messages", big, nil, 413, "request_too_large"},
		{"413 on count_tokens", "POST", "/v1/messages/count_tokens", big, nil, 413, "request_too_large"},
		{"404 under /v1/messages", "POST", "/v1/messages/batches", `{}`, nil, 404, "not_found_error"},
		{"404 with anthropic-version", "POST", "/v1/complete", `{}`, map[string]string{"anthropic-version": "2023-06-01"}, 404, "not_found_error"},
		{"405", "GET", "/v1/messages", ``, nil, 405, "invalid_request_error"},
		{"unknown model", "POST", "/v1/messages", `{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil, 404, "not_found_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := do(t, tt.method, n.URL()+tt.path, tt.body, tt.header)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if typ := anthropicError(t, b); typ != tt.typ {
				t.Errorf("type %q, want %q", typ, tt.typ)
			}
		})
	}
	// Chunked: the limit trips while decoding.
	req, _ := http.NewRequest("POST", n.URL()+"/v1/messages", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || anthropicError(t, b) != "request_too_large" {
		t.Errorf("chunked: %d %s", resp.StatusCode, b)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	resp, b := do(t, "GET", n.URL()+"/health", "", nil)
	var h router.Health
	if err := json.Unmarshal(b, &h); err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %d %s", resp.StatusCode, b)
	}
	if h.Status != "ok" || h.Version != "test" || len(h.Engines) != 0 || h.MXMemory.Active != "0 B" {
		t.Errorf("health before load = %+v", h)
	}

	chat := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	if resp, b := do(t, "POST", n.URL()+"/v1/chat/completions", chat, nil); resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	do(t, "POST", n.URL()+"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, nil)

	_, b = do(t, "GET", n.URL()+"/health", "", nil)
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Engines) != 1 || h.Engines[0] != "demo" || h.MXMemory.ActiveBytes <= 0 || h.MXMemory.PeakBytes < h.MXMemory.ActiveBytes ||
		h.MXMemory.Active != router.HumanBytes(h.MXMemory.ActiveBytes) {
		t.Errorf("health after load = %+v", h)
	}

	_, b = do(t, "GET", n.URL()+"/metrics", "", nil)
	var m struct {
		Total, OK, Failed, Gen, Prompt, Active int64
		Models                                 map[string]map[string]int64
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("metrics: %s", b)
	}
	for k, dst := range map[string]any{"total_requests": &m.Total, "successful_requests": &m.OK, "failed_requests": &m.Failed,
		"total_tokens_generated": &m.Gen, "total_tokens_prompt": &m.Prompt, "active_requests": &m.Active, "model_stats": &m.Models} {
		if err := json.Unmarshal(raw[k], dst); err != nil {
			t.Fatalf("metrics %s: %v in %s", k, err, b)
		}
	}
	if m.Total != 2 || m.OK != 1 || m.Failed != 1 || m.Active != 0 || m.Gen < 1 || m.Gen > 3 || m.Prompt < 1 ||
		m.Models["demo"]["requests"] != 1 || m.Models["demo"]["tokens_generated"] != m.Gen {
		t.Errorf("metrics = %s", b)
	}

	for _, tc := range []struct{ query, accept string }{{"?format=prometheus", ""}, {"", "text/plain"}} {
		resp, b := do(t, "GET", n.URL()+"/metrics"+tc.query, "", map[string]string{"Accept": tc.accept})
		text := string(b)
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("content type %q", resp.Header.Get("Content-Type"))
		}
		for _, want := range []string{
			`fusion_http_requests_total{code="200",method="POST",route="/v1/chat/completions"} 1`,
			`fusion_http_requests_total{code="404",method="POST",route="/v1/chat/completions"} 1`,
			`fusion_generation_requests_total{model="demo",outcome="ok"} 1`,
			`fusion_generated_tokens_total{model="demo"} ` + itoa(m.Gen),
			`fusion_time_to_first_token_seconds_count{model="demo"} 1`,
			`fusion_http_request_duration_seconds_bucket{method="POST",route="/v1/chat/completions",le="+Inf"} 2`,
			"fusion_engine_in_flight 0", "fusion_engine_queue_depth 0", "fusion_engine_cancelled_total 0",
			"fusion_http_requests_in_flight 1", "go_goroutines",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("prometheus output lacks %q", want)
			}
		}
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// route is a route and a valid body for it, with the JSON kinds each field
// takes, for the type-confusion property.
type route struct {
	method, path string
	body         map[string]any
	kinds        map[string]string // field → kinds it accepts: s(tring) i(nteger) n(umber) b(ool) a(rray) o(bject)
}

var common = map[string]string{
	"model": "s", "temperature": "in", "top_p": "in", "top_k": "i", "min_p": "in", "repetition_penalty": "in",
	"presence_penalty": "in", "frequency_penalty": "in", "logit_bias": "o", "seed": "i", "stop": "sa", "max_tokens": "i",
	"n": "i", "user": "s", "stream": "b", "stream_options": "o", "task_tag": "s", "backend_override": "s",
}

func with(m map[string]string, extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

var routes = []route{
	{"POST", "/v1/chat/completions",
		map[string]any{"model": "demo", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 2},
		with(common, map[string]string{"messages": "a", "max_completion_tokens": "i", "logprobs": "b", "top_logprobs": "i",
			"tools": "a", "tool_choice": "so", "parallel_tool_calls": "b", "response_format": "o", "enable_thinking": "b",
			"chat_template_kwargs": "o", "reasoning_effort": "s"})},
	{"POST", "/v1/completions", map[string]any{"model": "demo", "prompt": "Once", "max_tokens": 2},
		with(common, map[string]string{"prompt": "sa", "echo": "b", "logprobs": "i", "suffix": "s", "best_of": "i"})},
	{"POST", "/tokenize", map[string]any{"model": "demo", "prompt": "hi"},
		map[string]string{"model": "s", "prompt": "s", "add_generation_prompt": "b", "enable_thinking": "b", "add_special_tokens": "b",
			"chat_template_kwargs": "o"}},
	{"POST", "/detokenize", map[string]any{"model": "demo", "tokens": []any{1, 2}}, map[string]string{"model": "s", "tokens": "a"}},
}

// confusers are values of each JSON kind.
var confusers = map[byte]any{'s': "x", 'i': 3, 'n': 1.5, 'b': true, 'a': []any{1}, 'o': map[string]any{"k": 1}}

// accepts reports whether a field of the given kinds takes a value of kind k.
func accepts(kinds string, k byte) bool {
	return strings.IndexByte(kinds, k) >= 0 || (k == 'i' && strings.IndexByte(kinds, 'n') >= 0)
}

// TestTypeConfusion replaces every field of a valid body with a value of
// each kind it does not accept: always a 400 in the OpenAI shape naming
// the field.
func TestTypeConfusion(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{MaxTokens: 4})
	count := 0
	for _, rt := range routes {
		resp, b := do(t, rt.method, n.URL()+rt.path, mustJSON(rt.body), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s valid body: %d %s", rt.path, resp.StatusCode, b)
		}
		for field, kinds := range rt.kinds {
			for k, v := range confusers {
				if accepts(kinds, k) {
					continue
				}
				body := map[string]any{}
				for f, fv := range rt.body {
					body[f] = fv
				}
				body[field] = v
				resp, b := do(t, rt.method, n.URL()+rt.path, mustJSON(body), nil)
				count++
				if resp.StatusCode != 400 {
					t.Errorf("%s %s=%v: status %d: %s", rt.path, field, v, resp.StatusCode, b)
					continue
				}
				_, typ, param, _ := apiError(t, b)
				if p, _ := param.(string); typ != "invalid_request_error" || !strings.HasPrefix(p, field) {
					t.Errorf("%s %s=%v: %s", rt.path, field, v, b)
				}
			}
		}
	}
	t.Logf("%d type-confused requests", count)
}

// malformed are bodies no route accepts.
var malformed = []string{
	``, ` `, `null`, `true`, `1`, `"str"`, `[]`, `[{}]`, `{`, `{"model"`, `{"model":}`, `{"model":"demo",}`,
	`{"model":"demo"}{"x":1}`, `{"model":"demo"} garbage`, `{'model':'demo'}`, `{"model":"demo","messages":[{"role":"user","content":"hi"}]`,
	"\x00\x01\x02", `{"model":"\ud800"}`, `{"model":NaN}`, `{"model":"demo","max_tokens":1e999}`,
	`{"model":"demo","n":-1}`, `{"model":"demo","max_tokens":99999999999999999999}`, `{"model":{"$gt":""}}`,
	`{"model":"demo","messages":[{"role":"user","content":"hi"}],"logit_bias":{"-1":5},"prompt":5,"tokens":"x"}`,
	`{"model":"demo","prompt":[[]]}`, `{"model":"demo","tokens":[-1]}`, `{"model":"demo","tokens":[1e9]}`,
}

// TestMalformedBodies posts every malformed body to every route: always a
// 4xx in the OpenAI shape.
func TestMalformedBodies(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{MaxTokens: 4})
	for _, rt := range routes {
		for _, body := range malformed {
			resp, b := do(t, rt.method, n.URL()+rt.path, body, nil)
			if resp.StatusCode < 400 || resp.StatusCode >= 500 {
				t.Errorf("%s %q: status %d: %s", rt.path, body, resp.StatusCode, b)
				continue
			}
			apiError(t, b)
		}
	}
}

func mustJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.String()
}

// FuzzRoutes posts arbitrary bodies to every route of a real node: never a
// 5xx, and every error in the OpenAI shape.
func FuzzRoutes(f *testing.F) {
	for i, rt := range routes {
		f.Add(uint8(i), mustJSON(rt.body))
	}
	for _, b := range malformed {
		f.Add(uint8(0), b)
		f.Add(uint8(1), b)
	}
	f.Add(uint8(4), `{}`)
	f.Add(uint8(0), `{"model":"demo","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"n":2,"max_tokens":2,"stream_options":{"include_usage":true}}`)
	n := nodetest.Start(f, nodetest.Options{MaxTokens: 4, MaxBodyBytes: 64 << 10})
	paths := append(routes, route{method: "POST", path: "/v1/models"}, route{method: "POST", path: "/health"})
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		rt := paths[int(which)%len(paths)]
		checkAnswer(t, n, rt.method, rt.path, body)
	})
}

func checkAnswer(t *testing.T, n *node.Node, method, path, body string) {
	resp, b := do(t, method, n.URL()+path, body, nil)
	switch {
	case resp.StatusCode >= 500:
		t.Fatalf("%s %q: status %d: %s", path, body, resp.StatusCode, b)
	case resp.StatusCode >= 400:
		apiError(t, b)
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		if !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
			t.Fatalf("%s %q: stream does not end with [DONE]: %s", path, body, b)
		}
	default:
		if !json.Valid(b) {
			t.Fatalf("%s %q: invalid JSON answer: %s", path, body, b)
		}
	}
}

// TestEngineRefusals: what the engine refuses reaches the client as a 4xx
// in the OpenAI shape, with the field named where the router knows it.
func TestEngineRefusals(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{MaxTokens: 8})
	tests := []struct {
		path, body string
		status     int
		param      any
	}{
		{"/v1/completions", `{"model":"demo","prompt":[1,2,999999]}`, 400, nil},
		{"/v1/completions", `{"model":"demo","prompt":"x","max_tokens":9}`, 400, "max_tokens"},
		{"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"x"}],"logit_bias":{"999999":1}}`, 400, "logit_bias"},
		{"/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "model"},
		{"/tokenize", `{"model":"nope","prompt":"x"}`, 404, "model"},
		{"/tokenize", `{"model":"demo","prompt":"x","messages":[{"role":"user","content":"x"}]}`, 400, "messages"},
		{"/detokenize", `{"model":"demo","tokens":[999999]}`, 400, nil},
		{"/detokenize", `{"model":"demo","tokens":[-1]}`, 400, "tokens"},
	}
	for _, tt := range tests {
		resp, b := do(t, "POST", n.URL()+tt.path, tt.body, nil)
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: status %d, want %d: %s", tt.path, tt.body, resp.StatusCode, tt.status, b)
			continue
		}
		if _, _, param, _ := apiError(t, b); param != tt.param {
			t.Errorf("%s %s: param %v, want %v", tt.path, tt.body, param, tt.param)
		}
	}
}
