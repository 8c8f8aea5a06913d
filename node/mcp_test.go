package node_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fusion/mcp/host"
	"fusion/mcp/host/mcptest"
	"fusion/node"
	"fusion/node/nodetest"
)

// apiDo sends a JSON request with the API key "k" and returns the status
// and the body.
func apiDo(t *testing.T, n *node.Node, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, n.URL()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// mcpDo sends an authenticated request to a /v1/mcp route and decodes the
// JSON answer.
func mcpDo(t *testing.T, n *node.Node, method, path, body string) (int, map[string]any) {
	t.Helper()
	code, raw := apiDo(t, n, method, path, body)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s %s: %d %q is not JSON", method, path, code, raw)
	}
	return code, doc
}

type mcpServerDoc struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Transport string `json:"transport"`
	ToolCount int    `json:"tool_count"`
	LastError string `json:"last_error"`
	PID       int    `json:"pid"`
	Restarts  int    `json:"restarts"`
}

func mcpServers(t *testing.T, n *node.Node) map[string]mcpServerDoc {
	t.Helper()
	code, doc := mcpDo(t, n, http.MethodGet, "/v1/mcp/servers", "")
	if code != 200 {
		t.Fatalf("servers: %d %v", code, doc)
	}
	b, _ := json.Marshal(doc["servers"])
	var list []mcpServerDoc
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]mcpServerDoc{}
	for _, s := range list {
		out[s.Name] = s
	}
	return out
}

// waitMCP waits until cond holds for the servers' report.
func waitMCP(t *testing.T, n *node.Node, what string, cond func(map[string]mcpServerDoc) bool) map[string]mcpServerDoc {
	t.Helper()
	var last map[string]mcpServerDoc
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = mcpServers(t, n); cond(last) {
			return last
		}
	}
	t.Fatalf("%s: servers %+v", what, last)
	return nil
}

func execute(t *testing.T, n *node.Node, tool string, args any) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"tool_name": tool, "arguments": args})
	return mcpDo(t, n, http.MethodPost, "/v1/mcp/execute", string(body))
}

// content returns the execute answer's content items of one type.
func content(doc map[string]any, typ string) []map[string]any {
	var out []map[string]any
	items, _ := doc["content"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok && m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

// TestMCPEndpoints runs real MCP servers from npm behind a node: two
// server-everything (so their tools collide), server-filesystem over a
// directory the test fills, and one that never starts. Every route is
// behind the API key; the failed server does not stop the node serving
// chat.
func TestMCPEndpoints(t *testing.T) {
	nodeBin, everything := mcptest.Everything(t)
	_, filesystem := mcptest.Filesystem(t)
	dir := mcptest.Files(t, "fusion was here\n")
	raw := fmt.Sprintf(`{"mcpServers": {
		"ev":  {"command": %[1]q, "args": [%[2]q, "stdio"]},
		"ev2": {"command": %[1]q, "args": [%[2]q, "stdio"]},
		"fs":  {"command": %[1]q, "args": [%[3]q, "${NOTES}"]},
		"broken": {"command": "/bin/sh", "args": ["-c", "echo 'fatal: config.toml not found' >&2; exit 2"]}
	}}`, nodeBin, everything, filesystem)
	cfg, err := host.ParseConfig([]byte(raw), func(k string) string { return map[string]string{"NOTES": dir}[k] })
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg,
		MCP: host.Options{CallTimeout: 5 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}})

	// Behind the API key, in OpenAI's error shape.
	resp, err := http.Get(n.URL() + "/v1/mcp/tools")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: %d", resp.StatusCode)
	}

	servers := waitMCP(t, n, "ev, ev2, fs ready and broken failed", func(s map[string]mcpServerDoc) bool {
		return s["ev"].State == "ready" && s["ev2"].State == "ready" && s["fs"].State == "ready" && s["broken"].State == "failed"
	})
	if b := servers["broken"]; !strings.Contains(b.LastError, "fatal: config.toml not found") || b.Transport != "stdio" {
		t.Errorf("broken: %+v", b)
	}
	if ev := servers["ev"]; ev.ToolCount < 10 || ev.PID == 0 {
		t.Errorf("ev: %+v", ev)
	}
	// The node keeps serving chat.
	chat := postChat(t, n, `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	chat.Body.Close()
	if chat.StatusCode != 200 {
		t.Errorf("chat beside a failed MCP server: %d", chat.StatusCode)
	}

	// Tools: colliding names are qualified, others are not.
	code, doc := mcpDo(t, n, http.MethodGet, "/v1/mcp/tools", "")
	if code != 200 {
		t.Fatalf("tools: %d %v", code, doc)
	}
	tools := map[string]map[string]any{}
	for _, it := range doc["tools"].([]any) {
		m := it.(map[string]any)
		tools[m["name"].(string)] = m
	}
	for name, server := range map[string]string{"ev__echo": "ev", "ev2__echo": "ev2", "read_text_file": "fs"} {
		tl := tools[name]
		if tl == nil || tl["server"] != server || tl["description"] == "" {
			t.Errorf("tool %s: %v", name, tl)
			continue
		}
		if schema, _ := tl["input_schema"].(map[string]any); schema["type"] != "object" {
			t.Errorf("tool %s input_schema %v", name, tl["input_schema"])
		}
	}
	if _, ok := tools["echo"]; ok {
		t.Error("echo is listed unqualified although two servers have it")
	}

	// Every content type the servers offer.
	code, doc = execute(t, n, "ev__echo", map[string]any{"message": "hi"})
	if code != 200 || doc["tool_name"] != "ev__echo" || doc["server"] != "ev" || doc["is_error"] != false {
		t.Fatalf("echo: %d %v", code, doc)
	}
	if texts := content(doc, "text"); len(texts) != 1 || texts[0]["text"] != "Echo: hi" {
		t.Errorf("echo content %v", doc["content"])
	}
	code, doc = execute(t, n, "ev2__get-tiny-image", nil)
	if imgs := content(doc, "image"); code != 200 || len(imgs) != 1 || imgs[0]["mime_type"] != "image/png" {
		t.Errorf("image: %d %v", code, doc)
	} else if png, err := base64.StdEncoding.DecodeString(imgs[0]["data"].(string)); err != nil || string(png[1:4]) != "PNG" {
		t.Errorf("image data: %v", err)
	}
	code, doc = execute(t, n, "ev__get-resource-links", map[string]any{"count": 3})
	if links := content(doc, "resource_link"); code != 200 || len(links) != 3 || !strings.HasPrefix(links[0]["uri"].(string), "demo://") {
		t.Errorf("resource links: %d %v", code, doc)
	}
	code, doc = execute(t, n, "ev__get-resource-reference", map[string]any{"resourceType": "Blob", "resourceId": 2})
	if res := content(doc, "resource"); code != 200 || len(res) != 1 {
		t.Errorf("embedded resource: %d %v", code, doc)
	} else if r, _ := res[0]["resource"].(map[string]any); r == nil || r["blob"] == nil || r["uri"] == "" {
		t.Errorf("embedded blob resource: %v", res[0])
	}
	code, doc = execute(t, n, "ev__get-structured-content", map[string]any{"location": "Chicago"})
	if sc, _ := doc["structured_content"].(map[string]any); code != 200 || sc["temperature"] == nil {
		t.Errorf("structured content: %d %v", code, doc)
	}
	code, doc = execute(t, n, "read_media_file", map[string]any{"path": filepath.Join(dir, "beep.wav")})
	if audio := content(doc, "audio"); code != 200 || len(audio) != 1 || audio[0]["mime_type"] != "audio/wav" || audio[0]["data"] != base64.StdEncoding.EncodeToString(mcptest.WAV) {
		t.Errorf("audio: %d %v", code, doc)
	}
	code, doc = execute(t, n, "read_text_file", map[string]any{"path": filepath.Join(dir, "note.txt")})
	if texts := content(doc, "text"); code != 200 || len(texts) != 1 || texts[0]["text"] != "fusion was here\n" {
		t.Errorf("read_text_file: %d %v", code, doc)
	}
	// A tool error is a 200 with is_error.
	code, doc = execute(t, n, "read_text_file", map[string]any{"path": "/etc/passwd"})
	if code != 200 || doc["is_error"] != true || len(content(doc, "text")) == 0 {
		t.Errorf("tool error: %d %v", code, doc)
	}

	// Bad requests.
	for _, tc := range []struct {
		body  string
		code  int
		param string
	}{
		{`{"tool_name": "ev__get-sum", "arguments": {"a": 1}}`, 400, "arguments.b"},
		{`{"tool_name": "ev__get-sum", "arguments": {"a": 1, "b": "two"}}`, 400, "arguments.b"},
		{`{"tool_name": "ev__get-sum", "arguments": [1, 2]}`, 400, "arguments"},
		{`{"arguments": {}}`, 400, "tool_name"},
		{`{"tool_name": 7}`, 400, "tool_name"},
		{`{"tool_name": "nope"}`, 404, "tool_name"},
		{`{"tool_name": "broken__anything"}`, 503, ""},
		{`not json`, 400, ""},
	} {
		code, doc := mcpDo(t, n, http.MethodPost, "/v1/mcp/execute", tc.body)
		e, _ := doc["error"].(map[string]any)
		if code != tc.code || e == nil || e["message"] == "" || (tc.param != "" && e["param"] != tc.param) {
			t.Errorf("%s: %d %v, want %d naming %q", tc.body, code, doc, tc.code, tc.param)
		}
	}
	if _, doc := mcpDo(t, n, http.MethodPost, "/v1/mcp/execute", `{"tool_name": "broken__anything"}`); !strings.Contains(fmt.Sprint(doc), "config.toml not found") {
		t.Errorf("not-ready error lacks the server's stderr: %v", doc)
	}

	// The call timeout is a 504.
	code, doc = execute(t, n, "ev2__trigger-long-running-operation", map[string]any{"duration": 10, "steps": 10})
	if code != http.StatusGatewayTimeout || !strings.Contains(fmt.Sprint(doc), "timeout") {
		t.Errorf("past the call timeout: %d %v", code, doc)
	}

	// The server killed mid-call: 502 saying so, restarted, next call fine.
	ev := mcpServers(t, n)["ev"]
	type answer struct {
		code int
		doc  map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		c, d := execute(t, n, "ev__trigger-long-running-operation", map[string]any{"duration": 4, "steps": 2})
		done <- answer{c, d}
	}()
	time.Sleep(1500 * time.Millisecond) // the 4 s call is in flight
	if err := syscall.Kill(ev.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.code != http.StatusBadGateway || !strings.Contains(fmt.Sprint(got.doc), "killed") {
		t.Errorf("killed mid-call: %d %v", got.code, got.doc)
	}
	waitMCP(t, n, "ev restarted", func(s map[string]mcpServerDoc) bool {
		return s["ev"].State == "ready" && s["ev"].PID != ev.PID && s["ev"].Restarts >= 1
	})
	if code, doc := execute(t, n, "ev__echo", map[string]any{"message": "again"}); code != 200 || content(doc, "text")[0]["text"] != "Echo: again" {
		t.Errorf("after the restart: %d %v", code, doc)
	}

	// Stopping the node leaves none of its servers' processes.
	var pids []int
	for _, s := range mcpServers(t, n) {
		if s.PID != 0 {
			pids = append(pids, s.PID)
		}
	}
	if len(pids) != 3 {
		t.Fatalf("pids %v, want 3", pids)
	}
	if err := n.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still there after the node stopped", pid)
		}
	}
}

// TestMCPClusterWide: a stdio server configured on one node of three is
// listed and executed from every node (forwarded over the MCP gRPC
// service), its typed errors crossing the hop: bad arguments stay a 400
// naming the field, a tool error a 200 with is_error.
func TestMCPClusterWide(t *testing.T) {
	nodeBin, everything := mcptest.Everything(t)
	cfg := host.Config{Servers: []host.ServerConfig{{Name: "ev", Command: nodeBin, Args: []string{everything, "stdio"}}}}
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("a", 1, nil), MCPServers: cfg})
	join := []string{a.Cluster().GossipAddr()}
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("b", 0, join)})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("c", 0, join)})

	for _, n := range []*node.Node{a, b, c} {
		servers := waitMCP(t, n, "ev ready on a, seen from every node", func(s map[string]mcpServerDoc) bool {
			return s["ev"].State == "ready"
		})
		if ev := servers["ev"]; len(servers) != 1 || ev.ToolCount < 10 {
			t.Errorf("servers seen from a node: %+v", servers)
		}
		code, doc := mcpDo(t, n, http.MethodGet, "/v1/mcp/servers", "")
		if list := doc["servers"].([]any); code != 200 || list[0].(map[string]any)["node"] != "a" {
			t.Errorf("the server's node: %v", doc)
		}
		code, doc = mcpDo(t, n, http.MethodGet, "/v1/mcp/tools", "")
		found := false
		for _, it := range doc["tools"].([]any) {
			if m := it.(map[string]any); m["name"] == "echo" && m["server"] == "ev" && m["input_schema"] != nil {
				found = true
			}
		}
		if code != 200 || !found {
			t.Errorf("tools seen from a node: %d %v", code, doc)
		}
	}
	for _, n := range []*node.Node{c, b, a} {
		code, doc := execute(t, n, "echo", map[string]any{"message": "from afar"})
		if texts := content(doc, "text"); code != 200 || len(texts) != 1 || texts[0]["text"] != "Echo: from afar" || doc["server"] != "ev" {
			t.Errorf("echo: %d %v", code, doc)
		}
	}
	code, doc := execute(t, c, "get-sum", map[string]any{"a": 1})
	if e, _ := doc["error"].(map[string]any); code != 400 || e["param"] != "arguments.b" {
		t.Errorf("bad arguments through a peer: %d %v", code, doc)
	}
	code, doc = execute(t, c, "get-resource-reference", map[string]any{"resourceType": "Text", "resourceId": -1})
	if code != 200 || doc["is_error"] != true {
		t.Errorf("tool error through a peer: %d %v", code, doc)
	}
	code, doc = execute(t, c, "ev__get-tiny-image", nil)
	if imgs := content(doc, "image"); code != 200 || len(imgs) != 1 || imgs[0]["mime_type"] != "image/png" {
		t.Errorf("image through a peer: %d %v", code, doc)
	}
	if code, _ := execute(t, c, "nope", nil); code != 404 {
		t.Errorf("unknown tool from a node without servers: %d", code)
	}
}

// TestMCPNodesField: every node has the same configuration, whose stdio
// server names node a in "nodes": only a runs it (one process in the
// cluster), every node lists it as a's, and calls from b and c run on a.
// A lone node the server does not name lists it as remote and refuses
// its calls with 503.
func TestMCPNodesField(t *testing.T) {
	nodeBin, everything := mcptest.Everything(t)
	raw := fmt.Sprintf(`{"mcpServers": {"ev": {"command": %q, "args": [%q, "stdio"], "nodes": ["a"]}}}`, nodeBin, everything)
	cfg, err := host.ParseConfig([]byte(raw), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("a", 1, nil), MCPServers: cfg})
	join := []string{a.Cluster().GossipAddr()}
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("b", 0, join), MCPServers: cfg})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", Cluster: nodetest.Member("c", 0, join), MCPServers: cfg})
	if st := b.MCP().Servers(); len(st) != 1 || st[0].State != host.StateRemote || st[0].PID != 0 {
		t.Errorf("b's own host: %+v", st)
	}
	for _, n := range []*node.Node{b, c, a} {
		waitMCP(t, n, "ev ready on a", func(s map[string]mcpServerDoc) bool { return s["ev"].State == "ready" })
		code, doc := mcpDo(t, n, http.MethodGet, "/v1/mcp/servers", "")
		list, _ := doc["servers"].([]any)
		if code != 200 || len(list) != 1 {
			t.Fatalf("servers: %d %v", code, doc)
		}
		if s := list[0].(map[string]any); s["node"] != "a" || fmt.Sprint(s["nodes"]) != "[a]" {
			t.Errorf("the server seen from a node: %v", s)
		}
		code, doc = execute(t, n, "echo", map[string]any{"message": "where"})
		if texts := content(doc, "text"); code != 200 || len(texts) != 1 || texts[0]["text"] != "Echo: where" {
			t.Errorf("echo: %d %v", code, doc)
		}
	}

	lone := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg})
	servers := mcpServers(t, lone)
	if s := servers["ev"]; s.State != "remote" || s.PID != 0 {
		t.Errorf("a node the server does not name: %+v", s)
	}
	if code, doc := execute(t, lone, "ev__echo", map[string]any{"message": "x"}); code != 503 || !strings.Contains(fmt.Sprint(doc), "runs on a only") {
		t.Errorf("calling it there: %d %v", code, doc)
	}
}
