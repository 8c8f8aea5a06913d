package openclaw_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/openclaw"
)

// The tests run a real node (the runner with the random-weight demo
// model, the router, HTTP on loopback) and talk to it as a client would.

const apiKey = "sk-openclaw-test"

var client = &http.Client{Timeout: 60 * time.Second}

func start(t *testing.T, o openclaw.Options) *node.Node {
	t.Helper()
	return nodetest.Start(t, nodetest.Options{APIKey: apiKey, MaxTokens: 512, OpenClaw: o})
}

// call sends a JSON request and returns the status and decoded body.
func call(t *testing.T, n *node.Node, method, path string, body any) (int, map[string]any) {
	t.Helper()
	status, raw := callRaw(t, n, method, path, body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: answer is not a JSON object: %s", method, path, raw)
	}
	return status, out
}

func callRaw(t *testing.T, n *node.Node, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, n.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// want checks the status of an answer, printing the body when it differs.
func want(t *testing.T, what string, status, wantStatus int, body map[string]any) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("%s: status %d, want %d: %v", what, status, wantStatus, body)
	}
}

// errorOf checks that body is an OpenAI error and returns its code and
// param.
func errorOf(t *testing.T, body map[string]any) (code, param any) {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	if !ok || len(body) != 1 {
		t.Fatalf("not an OpenAI error: %v", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("error lacks %q: %v", k, body)
		}
	}
	if m, _ := e["message"].(string); m == "" {
		t.Fatalf("empty error message: %v", body)
	}
	return e["code"], e["param"]
}

var weatherTool = map[string]any{
	"type": "function",
	"function": map[string]any{
		"name":        "get_weather",
		"description": "Get current weather for a city",
		"parameters": map[string]any{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required":   []string{"city"},
		},
	},
}

func createSession(t *testing.T, n *node.Node, body map[string]any) string {
	t.Helper()
	if body == nil {
		body = map[string]any{"model": nodetest.Model}
	}
	status, s := call(t, n, "POST", "/v1/openclaw/agent/sessions", body)
	want(t, "create", status, 200, s)
	id, _ := s["session_id"].(string)
	if id == "" {
		t.Fatalf("create: no session_id: %v", s)
	}
	return id
}

// event is one server-sent event.
type event struct {
	name string
	data map[string]any
}

// stream is an open event stream.
type stream struct {
	events chan event
	cancel context.CancelFunc
}

// openStream opens the event stream of session id; it closes when the
// test ends.
func openStream(t *testing.T, n *node.Node, id string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", n.URL()+"/v1/openclaw/agent/stream/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("stream: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &stream{events: make(chan event, 1024), cancel: cancel}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				var data map[string]any
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
					data = map[string]any{"unparsable": line}
				}
				s.events <- event{name, data}
			}
		}
	}()
	t.Cleanup(cancel)
	return s
}

// next returns the next event other than a heartbeat; ok is false when
// the stream ended.
func (s *stream) next(t *testing.T) (event, bool) {
	t.Helper()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return event{}, false
			}
			if ev.name == openclaw.EventHeartbeat {
				continue
			}
			return ev, true
		case <-time.After(20 * time.Second):
			t.Fatal("no event within 20 s")
		}
	}
}

// expect reads the next events and checks their names.
func (s *stream) expect(t *testing.T, names ...string) []event {
	t.Helper()
	var got []event
	for _, want := range names {
		ev, ok := s.next(t)
		if !ok {
			t.Fatalf("stream ended; want %s (got so far %v)", want, eventNames(got))
		}
		got = append(got, ev)
		if ev.name != want {
			t.Fatalf("events %v, want %v", eventNames(got), names)
		}
	}
	return got
}

// ended checks that the stream ends with no further event.
func (s *stream) ended(t *testing.T) {
	t.Helper()
	if ev, ok := s.next(t); ok {
		t.Fatalf("event %s %v after the end", ev.name, ev.data)
	}
}

func eventNames(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.name
	}
	return out
}

// num reads a JSON number as an int.
func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func sessionOf(t *testing.T, n *node.Node, id string) map[string]any {
	t.Helper()
	status, s := call(t, n, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
	want(t, "get session", status, 200, s)
	return s
}

func listIDs(t *testing.T, n *node.Node) []string {
	t.Helper()
	status, l := call(t, n, "GET", "/v1/openclaw/agent/sessions", nil)
	want(t, "list", status, 200, l)
	var ids []string
	list, _ := l["sessions"].([]any)
	for _, s := range list {
		ids = append(ids, s.(map[string]any)["session_id"].(string))
	}
	if num(l["count"]) != len(ids) {
		t.Fatalf("list count %v for %d sessions", l["count"], len(ids))
	}
	return ids
}

func assertTurnShape(t *testing.T, res map[string]any, id string) {
	t.Helper()
	for _, k := range []string{"content", "tool_calls", "usage", "session_id"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("turn answer lacks %q: %v", k, res)
		}
	}
	if _, ok := res["content"].(string); !ok {
		t.Fatalf("content is not a string: %v", res)
	}
	if _, ok := res["tool_calls"].([]any); !ok {
		t.Fatalf("tool_calls is not an array: %v", res)
	}
	u, _ := res["usage"].(map[string]any)
	if num(u["prompt_tokens"]) <= 0 || num(u["completion_tokens"]) <= 0 {
		t.Fatalf("usage %v", res["usage"])
	}
	if res["session_id"] != id {
		t.Fatalf("session_id %v, want %s", res["session_id"], id)
	}
}
