package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"fusion/node/nodetest"
)

// claudeCodeRequest is shaped like what Claude Code sends: system blocks
// with cache_control, many tools with large input schemas, earlier
// tool_use / tool_result turns, streaming.
func claudeCodeRequest(t *testing.T) []byte {
	t.Helper()
	var tools []map[string]any
	for i := range 16 {
		props := map[string]any{}
		for j := range 8 {
			props[fmt.Sprintf("param_%d", j)] = map[string]any{
				"type":        []string{"string", "integer", "boolean", "string", "array", "string", "number", "string"}[j],
				"description": fmt.Sprintf("Parameter %d of tool %d. It controls how the tool reads files, runs commands and reports what it found to the agent.", j, i),
			}
			if j == 4 {
				props["param_4"].(map[string]any)["items"] = map[string]any{"type": "string"}
			}
		}
		tools = append(tools, map[string]any{
			"name":         fmt.Sprintf("tool_%d", i),
			"description":  fmt.Sprintf("Tool %d: a Claude Code style tool with a long description that explains when to use it, when not to, and what it returns.", i),
			"input_schema": map[string]any{"type": "object", "properties": props, "required": []string{"param_0"}, "additionalProperties": false},
		})
	}
	body := map[string]any{
		"model": nodetest.Model, "max_tokens": 8, "stream": true, "temperature": 0,
		"system": []map[string]any{
			{"type": "text", "text": "You are Claude Code, a coding agent."},
			{"type": "text", "text": strings.Repeat("Follow the repository's conventions. ", 20), "cache_control": map[string]string{"type": "ephemeral"}},
		},
		"tools": tools,
		"messages": []map[string]any{
			{"role": "user", "content": []map[string]any{{"type": "text", "text": "List the Go files and run the tests."}}},
			{"role": "assistant", "content": []map[string]any{
				{"type": "text", "text": "I'll list the files first."},
				{"type": "tool_use", "id": "toolu_01", "name": "tool_3", "input": map[string]any{"param_0": "*.go"}},
			}},
			{"role": "user", "content": []map[string]any{
				{"type": "tool_result", "tool_use_id": "toolu_01", "content": "main.go\nserver.go\nserver_test.go"},
			}},
			{"role": "assistant", "content": []map[string]any{
				{"type": "tool_use", "id": "toolu_02", "name": "tool_7", "input": map[string]any{"param_0": "go test ./...", "param_2": true}},
			}},
			{"role": "user", "content": []map[string]any{
				{"type": "tool_result", "tool_use_id": "toolu_02", "is_error": true, "content": []map[string]any{{"type": "text", "text": "FAIL server_test.go:12"}}},
				{"type": "text", "text": "Fix it.", "cache_control": map[string]string{"type": "ephemeral"}},
			}},
		},
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type sseEvent struct {
	name string
	data map[string]any
}

// streamMessages posts body to /v1/messages and returns its events.
func streamMessages(t *testing.T, url string, body []byte) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("anthropic-beta", "prompt-caching-2024-07-31")
	return streamMessagesReq(t, req)
}

// streamMessagesReq sends a streamed /v1/messages request and returns its
// events.
func streamMessagesReq(t *testing.T, req *http.Request) []sseEvent {
	t.Helper()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var events []sseEvent
	var name string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		} else if v, ok := strings.CutPrefix(line, "data: "); ok {
			var d map[string]any
			if err := json.Unmarshal([]byte(v), &d); err != nil {
				t.Fatalf("event %s: data is not JSON: %s", name, v)
			}
			if d["type"] != name {
				t.Fatalf("event %q carries type %v", name, d["type"])
			}
			events = append(events, sseEvent{name, d})
		}
	}
	return events
}

// checkStream asserts the Messages streaming grammar: message_start,
// then blocks each started, given deltas and stopped in index order
// (pings anywhere), then one message_delta with a stop_reason and
// message_stop last. It returns message_delta's usage (the whole
// request's, with the cache fields).
func checkStream(t *testing.T, events []sseEvent) map[string]any {
	t.Helper()
	if len(events) < 3 || events[0].name != "message_start" || events[len(events)-1].name != "message_stop" {
		t.Fatalf("stream does not open with message_start and close with message_stop: %v", names(events))
	}
	open, next, deltas := -1, 0, 0
	var usage map[string]any
	for _, ev := range events[1 : len(events)-1] {
		switch ev.name {
		case "ping":
		case "content_block_start":
			if open != -1 || int(ev.data["index"].(float64)) != next {
				t.Fatalf("block %v started while %d open (next %d): %v", ev.data["index"], open, next, names(events))
			}
			open = next
		case "content_block_delta":
			if open == -1 || int(ev.data["index"].(float64)) != open {
				t.Fatalf("delta outside its block: %v", names(events))
			}
		case "content_block_stop":
			if open == -1 || int(ev.data["index"].(float64)) != open {
				t.Fatalf("stop of a block not open: %v", names(events))
			}
			open, next = -1, next+1
		case "message_delta":
			deltas++
			if open != -1 {
				t.Fatalf("message_delta with block %d open", open)
			}
			d := ev.data["delta"].(map[string]any)
			if r, _ := d["stop_reason"].(string); r == "" {
				t.Fatalf("message_delta without stop_reason: %v", ev.data)
			}
			usage, _ = ev.data["usage"].(map[string]any)
		default:
			t.Fatalf("unexpected event %q", ev.name)
		}
	}
	if deltas != 1 {
		t.Fatalf("%d message_delta events", deltas)
	}
	if usage == nil {
		t.Fatal("message_delta without usage")
	}
	return usage
}

func names(events []sseEvent) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev.name)
	}
	return out
}

// TestClaudeCodeShapedRequest: a Claude Code–shaped streaming request is
// answered with a well-formed event stream, and the identical second
// request reports its prefix read from the cache.
func TestClaudeCodeShapedRequest(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	body := claudeCodeRequest(t)

	first := checkStream(t, streamMessages(t, n.URL(), body))
	input := first["input_tokens"].(float64) + first["cache_creation_input_tokens"].(float64) + first["cache_read_input_tokens"].(float64)
	if input < 1000 {
		t.Fatalf("the prompt is only %v tokens; the request should be large: %v", input, first)
	}
	if first["cache_read_input_tokens"].(float64) != 0 || first["cache_creation_input_tokens"].(float64) <= 0 {
		t.Errorf("first request: read from an empty cache, or stored nothing: %v", first)
	}
	second := checkStream(t, streamMessages(t, n.URL(), body))
	read := second["cache_read_input_tokens"].(float64)
	t.Logf("prompt %v tokens; first request usage %v; second %v", input, first, second)
	if read <= 0 || read > input {
		t.Errorf("second identical request: cache_read_input_tokens %v of %v", read, input)
	}
	if got := second["input_tokens"].(float64) + second["cache_creation_input_tokens"].(float64) + read; got != input {
		t.Errorf("second request's input counts add up to %v, want %v", got, input)
	}
}
