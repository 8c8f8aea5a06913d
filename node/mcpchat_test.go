package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/mcp/host"
	"fusion/mcp/host/mcptest"
	"fusion/node"
	"fusion/node/nodetest"
)

// fsConfig is server-filesystem over a fresh directory, as server "fs".
func fsConfig(t *testing.T) (host.Config, string) {
	t.Helper()
	nodeBin, filesystem := mcptest.Filesystem(t)
	dir := mcptest.Files(t, "fusion was here\n")
	return host.Config{Servers: []host.ServerConfig{{Name: "fs", Command: nodeBin, Args: []string{filesystem, dir}}}}, dir
}

// mcpChatBody is a chat completion that asks for fs's
// list_allowed_directories and forces the model to call it (the demo
// model's weights are random: only a forced call is certain).
func mcpChatBody(stream bool) string {
	opts := ""
	if stream {
		opts = `, "stream": true, "stream_options": {"include_usage": true}`
	}
	return fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "Which directories may you read?"}],
		"tools": [{"type": "mcp", "server_label": "fs", "allowed_tools": ["list_allowed_directories"]}],
		"tool_choice": {"type": "function", "function": {"name": "list_allowed_directories"}},
		"max_tokens": 120, "seed": 1%s}`, nodetest.Model, opts)
}

// mcpCallDoc is a message's mcp_calls entry or a delta's mcp_call.
type mcpCallDoc struct {
	ID          string  `json:"id"`
	Type        string  `json:"type"`
	ServerLabel string  `json:"server_label"`
	Name        string  `json:"name"`
	Arguments   string  `json:"arguments"`
	Status      string  `json:"status"`
	Output      *string `json:"output"`
	Error       *string `json:"error"`
}

// checkListCall asserts a completed call of fs's list_allowed_directories
// whose output is the real server's answer: the directory the test made.
func checkListCall(t *testing.T, what string, c mcpCallDoc, dir string) {
	t.Helper()
	if c.Type != "mcp_call" || c.ServerLabel != "fs" || c.Name != "list_allowed_directories" || c.ID == "" ||
		c.Status != "completed" || c.Error != nil || c.Output == nil || !strings.Contains(*c.Output, dir) {
		t.Errorf("%s: %+v (want the output to name %s)", what, c, dir)
	}
}

// chatMCP posts a non-streamed MCP chat completion and returns the
// message's calls and the finish reason.
func chatMCP(t *testing.T, n *node.Node, body string) ([]mcpCallDoc, string) {
	t.Helper()
	code, raw := apiDo(t, n, http.MethodPost, "/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("chat with MCP tools: %d %s", code, raw)
	}
	return mcpAnswer(t, raw)
}

// mcpAnswer reads a chat completion's MCP calls and finish reason.
func mcpAnswer(t *testing.T, raw []byte) ([]mcpCallDoc, string) {
	t.Helper()
	var doc struct {
		Choices []struct {
			Message struct {
				MCPCalls  []mcpCallDoc `json:"mcp_calls"`
				ToolCalls []any        `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Choices) != 1 {
		t.Fatalf("chat with MCP tools: %s", raw)
	}
	if len(doc.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("server-run calls are listed as the client's tool_calls: %s", raw)
	}
	return doc.Choices[0].Message.MCPCalls, doc.Choices[0].FinishReason
}

// streamMCP posts a streamed MCP chat completion and returns the
// mcp_call deltas in order and the finish reason.
func streamMCP(t *testing.T, n *node.Node, body string) ([]mcpCallDoc, string) {
	t.Helper()
	resp := postChat(t, n, body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("streamed chat with MCP tools: %d", resp.StatusCode)
	}
	var calls []mcpCallDoc
	finish, done := "", false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					MCPCall *mcpCallDoc `json:"mcp_call"`
				}
				FinishReason string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("chunk %s: %v", line, err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.MCPCall != nil {
				calls = append(calls, *ch.Delta.MCPCall)
			}
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
	}
	if !done {
		t.Error("the stream did not end with [DONE]")
	}
	return calls, finish
}

// TestChatRunsMCPTools: a chat completion that asks for an MCP server's
// tools, forced to call one, gets the call run on the real server
// (server-filesystem, over a directory the test made) and the real
// result in its answer, whole and streamed; the step limit ends the
// answer with max_tool_calls; bad asks are 400s naming the field.
func TestChatRunsMCPTools(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })

	calls, finish := chatMCP(t, n, mcpChatBody(false))
	if len(calls) == 0 {
		t.Fatal("no MCP call in the answer")
	}
	checkListCall(t, "first call", calls[0], dir)
	if finish != "stop" && finish != "length" && finish != "max_tool_calls" {
		t.Errorf("finish_reason %q", finish)
	}

	calls, finish = streamMCP(t, n, mcpChatBody(true))
	if len(calls) < 2 || calls[0].Status != "in_progress" || calls[0].Output != nil || calls[1].ID != calls[0].ID {
		t.Fatalf("streamed mcp_call deltas: %+v", calls)
	}
	checkListCall(t, "streamed result", calls[1], dir)
	if finish == "" {
		t.Error("no finish_reason in the stream")
	}

	// Bad asks.
	for _, tc := range []struct {
		tools, choice string
		code          int
		param         string
	}{
		{`[{"type": "mcp", "server_label": "nope"}]`, `"auto"`, 400, "tools[0].server_label"},
		{`[{"type": "mcp"}]`, `"auto"`, 400, "tools[0].server_label"},
		{`[{"type": "mcp", "server_label": 3}]`, `"auto"`, 400, "tools[0].server_label"},
		{`[{"type": "mcp", "server_label": "fs", "allowed_tools": ["rm_rf"]}]`, `"auto"`, 400, "tools[0].allowed_tools"},
		{`[{"type": "mcp", "server_label": "fs", "allowed_tools": [1]}]`, `"auto"`, 400, "tools[0].allowed_tools[0]"},
		{`[{"type": "mcp", "server_label": "fs", "allowed_tools": "x"}]`, `"auto"`, 400, "tools[0].allowed_tools"},
		{`[{"type": "mcp", "server_label": "fs", "allowed_tools": ["read_text_file"]}]`,
			`{"type": "function", "function": {"name": "list_allowed_directories"}}`, 400, "tool_choice"},
		{`[{"type": "function", "function": {"name": "read_text_file"}}, {"type": "mcp", "server_label": "fs"}]`, `"auto"`, 400, "tools"},
	} {
		body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "hi"}], "tools": %s, "tool_choice": %s, "max_tokens": 4}`,
			nodetest.Model, tc.tools, tc.choice)
		code, doc := mcpDo(t, n, http.MethodPost, "/v1/chat/completions", body)
		e, _ := doc["error"].(map[string]any)
		if code != tc.code || e == nil || e["param"] != tc.param || e["message"] == "" {
			t.Errorf("tools %s: %d %v, want %d naming %s", tc.tools, code, doc, tc.code, tc.param)
		}
	}
}

// TestChatMCPStepLimit: with one model turn allowed, the forced call is
// run and shown, and the answer ends with finish_reason max_tool_calls.
func TestChatMCPStepLimit(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg, MCPMaxSteps: 1})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	calls, finish := chatMCP(t, n, mcpChatBody(false))
	if len(calls) != 1 || finish != "max_tool_calls" {
		t.Fatalf("one step: calls %+v, finish %q", calls, finish)
	}
	checkListCall(t, "the one call", calls[0], dir)
}

// TestChatMCPToolsClusterWide: in a 3-node cluster where only A runs the
// MCP server and only B has the model, a chat completion sent to C (which
// has neither) runs each model turn on B and the tool on A.
func TestChatMCPToolsClusterWide(t *testing.T) {
	cfg, dir := fsConfig(t)
	empty := t.TempDir()
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: empty, Cluster: nodetest.Member("a", 1, nil), MCPServers: cfg})
	join := []string{a.Cluster().GossipAddr()}
	nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("b", 0, join)})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: nodetest.Member("c", 0, join)})
	waitMCP(t, c, "fs ready on a, seen from c", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })

	var calls []mcpCallDoc
	var finish string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, raw := apiDo(t, c, http.MethodPost, "/v1/chat/completions", mcpChatBody(false))
		if code == 200 {
			calls, finish = mcpAnswer(t, raw)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chat through c: %d %s", code, raw)
		}
	}
	if len(calls) == 0 {
		t.Fatal("no MCP call in the answer through c")
	}
	checkListCall(t, "call through c", calls[0], dir)
	if finish == "" {
		t.Error("no finish_reason")
	}
}

// messagesMCP posts a Messages request and returns its status and body.
func messagesMCP(t *testing.T, n *node.Node, path string, body any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	code, out := apiDo(t, n, http.MethodPost, path, string(raw))
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%s: %d %q is not JSON", path, code, out)
	}
	return code, doc
}

// mcpBlocks checks an answer's mcp_tool_use and mcp_tool_result blocks:
// a use of fs's list_allowed_directories, then its result naming dir.
func mcpBlocks(t *testing.T, what string, content []any, dir string) {
	t.Helper()
	var use, result map[string]any
	for _, it := range content {
		b := it.(map[string]any)
		switch b["type"] {
		case "mcp_tool_use":
			if use == nil {
				use = b
			}
		case "mcp_tool_result":
			if result == nil {
				result = b
			}
		case "tool_use":
			t.Errorf("%s: a server-run call is shown as the client's tool_use: %v", what, b)
		}
	}
	if use == nil || result == nil {
		t.Fatalf("%s: no mcp_tool_use and mcp_tool_result in %v", what, content)
	}
	id, _ := use["id"].(string)
	if use["name"] != "list_allowed_directories" || use["server_name"] != "fs" || !strings.HasPrefix(id, "mcptoolu_") || use["input"] == nil {
		t.Errorf("%s: mcp_tool_use %v", what, use)
	}
	texts, _ := result["content"].([]any)
	if result["tool_use_id"] != id || result["is_error"] != false || len(texts) != 1 ||
		!strings.Contains(texts[0].(map[string]any)["text"].(string), dir) {
		t.Errorf("%s: mcp_tool_result %v (want the text to name %s)", what, result, dir)
	}
}

// TestMessagesRunsMCPTools: the Messages API asks for MCP tools in the MCP
// connector's mcp_servers shape and in the tools shape of the chat API;
// the forced call runs on the real server and comes back as
// mcp_tool_use / mcp_tool_result blocks, whole and streamed; the answer
// sent back as history is accepted; count_tokens counts the MCP tools;
// one step ends with pause_turn.
func TestMessagesRunsMCPTools(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	user := []any{map[string]any{"role": "user", "content": "Which directories may you read?"}}
	force := map[string]any{"type": "tool", "name": "list_allowed_directories"}
	connector := []any{map[string]any{"type": "url", "url": "https://example.invalid/mcp", "name": "fs",
		"tool_configuration": map[string]any{"enabled": true, "allowed_tools": []any{"list_allowed_directories"}}}}

	code, doc := messagesMCP(t, n, "/v1/messages", map[string]any{"model": nodetest.Model, "max_tokens": 120, "messages": user,
		"mcp_servers": connector, "tool_choice": force})
	if code != 200 {
		t.Fatalf("messages with mcp_servers: %d %v", code, doc)
	}
	content, _ := doc["content"].([]any)
	mcpBlocks(t, "mcp_servers", content, dir)

	// The answer goes back as history, and the conversation continues.
	history := append(append([]any{}, user...), map[string]any{"role": "assistant", "content": content},
		map[string]any{"role": "user", "content": "Thanks."})
	code, again := messagesMCP(t, n, "/v1/messages", map[string]any{"model": nodetest.Model, "max_tokens": 4, "messages": history,
		"mcp_servers": connector})
	if code != 200 {
		t.Errorf("the answer's MCP blocks as history: %d %v", code, again)
	}

	// The tools shape, streamed.
	body, _ := json.Marshal(map[string]any{"model": nodetest.Model, "max_tokens": 120, "messages": user, "stream": true,
		"tools":       []any{map[string]any{"type": "mcp", "server_label": "fs", "allowed_tools": []any{"list_allowed_directories"}}},
		"tool_choice": force})
	req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/messages", strings.NewReader(string(body)))
	req.Header.Set("x-api-key", "k")
	events := streamMessagesReq(t, req)
	var started []any
	for _, e := range events {
		if e.name == "content_block_start" {
			started = append(started, e.data["content_block"])
		}
	}
	mcpBlocks(t, "streamed", started, dir)
	if last := events[len(events)-1]; last.name != "message_stop" {
		t.Errorf("stream ends with %s", last.name)
	}

	// count_tokens counts the MCP tools' definitions.
	_, plain := messagesMCP(t, n, "/v1/messages/count_tokens", map[string]any{"model": nodetest.Model, "messages": user})
	_, with := messagesMCP(t, n, "/v1/messages/count_tokens", map[string]any{"model": nodetest.Model, "messages": user, "mcp_servers": connector})
	if p, w := plain["input_tokens"].(float64), with["input_tokens"].(float64); w <= p {
		t.Errorf("count_tokens: %v with the MCP tools, %v without", w, p)
	}

	for _, tc := range []struct {
		servers any
		want    string
	}{
		{[]any{map[string]any{"type": "url", "name": "nope"}}, "mcp_servers.0.name"},
		{[]any{map[string]any{"type": "stdio", "name": "fs"}}, "mcp_servers.0.type"},
		{[]any{map[string]any{"type": "url"}}, "mcp_servers.0.name"},
		{[]any{map[string]any{"type": "url", "name": "fs", "tool_configuration": map[string]any{"allowed_tools": []any{"rm"}}}}, "mcp_servers.0.tool_configuration.allowed_tools"},
		{"fs", "mcp_servers"},
	} {
		code, doc := messagesMCP(t, n, "/v1/messages", map[string]any{"model": nodetest.Model, "max_tokens": 4, "messages": user, "mcp_servers": tc.servers})
		e, _ := doc["error"].(map[string]any)
		if msg, _ := e["message"].(string); code != 400 || e["type"] != "invalid_request_error" || !strings.HasPrefix(msg, tc.want) {
			t.Errorf("mcp_servers %v: %d %v, want a 400 about %s", tc.servers, code, doc, tc.want)
		}
	}
}

// TestMessagesMCPStepLimit: one model turn allowed: the forced call runs
// and the answer stops with pause_turn.
func TestMessagesMCPStepLimit(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg, MCPMaxSteps: 1})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	code, doc := messagesMCP(t, n, "/v1/messages", map[string]any{"model": nodetest.Model, "max_tokens": 120,
		"messages":    []any{map[string]any{"role": "user", "content": "Where?"}},
		"mcp_servers": []any{map[string]any{"type": "url", "name": "fs"}},
		"tool_choice": map[string]any{"type": "tool", "name": "list_allowed_directories"}})
	if code != 200 || doc["stop_reason"] != "pause_turn" {
		t.Fatalf("one step: %d %v", code, doc)
	}
	mcpBlocks(t, "one step", doc["content"].([]any), dir)
}

// TestOpenClawRunsMCPTools: an OpenClaw session whose tools name an MCP
// server: a turn forced to call its tool gets the call run on the real
// server, lists it under mcp_calls, and keeps the call and its result in
// the session's history for the next turn.
func TestOpenClawRunsMCPTools(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	id := ocOK(t, "create", n, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model,
		"tools": []any{map[string]any{"type": "mcp", "server_label": "fs", "allowed_tools": []any{"list_allowed_directories"}}}})["session_id"].(string)
	res := ocOK(t, "turn", n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "Where may you read?"}}, "max_tokens": 200, "seed": 1,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "list_allowed_directories"}}})
	raw, _ := json.Marshal(res["mcp_calls"])
	var calls []mcpCallDoc
	if err := json.Unmarshal(raw, &calls); err != nil || len(calls) == 0 {
		t.Fatalf("turn: %v", res)
	}
	checkListCall(t, "the turn's call", calls[0], dir)
	if tc, _ := res["tool_calls"].([]any); len(tc) != 0 {
		t.Errorf("a server-run call is listed as the client's: %v", res)
	}
	info := ocOK(t, "session", n, "GET", "/v1/openclaw/agent/sessions/"+id, nil)
	msgs, _ := info["messages"].([]any)
	found := false
	for _, m := range msgs {
		if mm := m.(map[string]any); mm["role"] == "tool" && mm["tool_call_id"] == calls[0].ID && strings.Contains(fmt.Sprint(mm["content"]), dir) {
			found = true
		}
	}
	if !found {
		t.Errorf("the history lacks the call's result: %v", msgs)
	}
	// The next turn continues on that history.
	ocOK(t, "next turn", n, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "Thanks."}}, "max_tokens": 4})
	// A session may name a server that is not configured (servers come
	// and go); its turns are 400s naming the field.
	bad := ocOK(t, "create", n, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model,
		"tools": []any{map[string]any{"type": "mcp", "server_label": "nope"}}})["session_id"].(string)
	code, doc := ocCall(t, n, "POST", "/v1/openclaw/agent/turns?session_id="+bad, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 4})
	if e, _ := doc["error"].(map[string]any); code != 400 || e["param"] != "tools[0].server_label" {
		t.Errorf("a session naming an unknown MCP server: %d %v", code, doc)
	}
}
