package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fusion/cluster/fsm"
	"fusion/internal/testenv"
	"fusion/mcp/host"
	"fusion/mcp/host/mcptest"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/admin"
)

// mcpAdmin sends a request to /admin/api/mcp/servers and returns the
// status and the raw answer.
func mcpAdmin(t *testing.T, n *node.Node, method, body string) (int, []byte) {
	t.Helper()
	return apiDo(t, n, method, "/admin/api/mcp/servers", body)
}

type mcpAdminDoc struct {
	MCPServers map[string]host.ServerConfig   `json:"mcpServers"`
	Source     string                         `json:"source"`
	Status     map[string][]host.ServerStatus `json:"status"`
}

func mcpAdminGet(t *testing.T, n *node.Node) (mcpAdminDoc, []byte) {
	t.Helper()
	code, raw := mcpAdmin(t, n, http.MethodGet, "")
	var doc mcpAdminDoc
	if err := json.Unmarshal(raw, &doc); code != 200 || err != nil {
		t.Fatalf("GET /admin/api/mcp/servers: %d %s", code, raw)
	}
	return doc, raw
}

func gone(pid int) bool { return syscall.Kill(pid, 0) != nil }

// TestMCPAdminConfig: on a lone node, GET /admin/api/mcp/servers shows
// the --mcp-config file until a PUT replaces it; a bad PUT is a 400
// naming the server and field and changes nothing; a good one is in force
// at once — an unchanged server keeps its process, a changed one
// restarts, an added one starts (its ${VAR} resolved from the node's
// environment), a dropped one's process is gone. Secrets are masked in
// every answer, a PUT of the mask keeps the stored secret, and no log
// line holds one.
func TestMCPAdminConfig(t *testing.T) {
	if admin.DefaultMaxMCPConfigBytes > fsm.MaxMCPConfigBytes {
		t.Fatalf("the admin bound %d is over the FSM's %d", admin.DefaultMaxMCPConfigBytes, fsm.MaxMCPConfigBytes)
	}
	nodeBin, everything := mcptest.Everything(t)
	_, filesystem := mcptest.Filesystem(t)
	dir := mcptest.Files(t, "admin was here\n")
	const secret = "s3cr3t-admin-42"
	file, err := host.ParseConfig([]byte(fmt.Sprintf(`{"mcpServers": {"ev": {"command": %q, "args": [%q, "stdio"]}}}`, nodeBin, everything)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	dataDir := t.TempDir()
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: file, DataDir: dataDir,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MCP: host.Options{TerminateGrace: 500 * time.Millisecond, Getenv: func(k string) string {
			return map[string]string{"NOTES": dir}[k]
		}}})

	doc, _ := mcpAdminGet(t, n)
	if doc.Source != "file" || doc.MCPServers["ev"].Command != nodeBin {
		t.Fatalf("before any PUT: %+v", doc)
	}
	ev := waitMCP(t, n, "ev ready", func(s map[string]mcpServerDoc) bool { return s["ev"].State == "ready" })["ev"]

	for _, tc := range []struct {
		body  string
		code  int
		param string
	}{
		{`{"mcpServers": `, 400, ""},
		{`{"mcpServers": {"x": {"url": "http://h/mcp", "type": "websocket"}}}`, 400, "mcpServers.x.type"},
		{`{"mcpServers": {"x": {"args": ["a"]}}}`, 400, "mcpServers.x.command"},
		{`{"mcpServers": {"x": {"command": "a", "env": {"T": 7}}}}`, 400, "mcpServers.x.env"},
		{`{"mcpServers": {"x": {"command": "a", "env": {"T": "********"}}}}`, 400, "mcpServers.x.env.T"},
		{`{"servers": {}}`, 400, "mcpServers"},
		{``, 400, "mcpServers"},
		{`{"mcpServers": {"x": {"command": "` + strings.Repeat("a", admin.DefaultMaxMCPConfigBytes) + `"}}}`, 413, ""},
	} {
		code, raw := mcpAdmin(t, n, http.MethodPut, tc.body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		if code != tc.code || (tc.param != "" && errParam(out) != tc.param) {
			t.Errorf("PUT %.80s: %d %s, want %d naming %q", tc.body, code, raw, tc.code, tc.param)
		}
	}
	if doc, _ := mcpAdminGet(t, n); doc.Source != "file" {
		t.Errorf("a refused PUT changed the configuration: %+v", doc)
	}

	// ev changes (a secret in its env), fs is added.
	put := fmt.Sprintf(`{"mcpServers": {
		"ev": {"command": %[1]q, "args": [%[2]q, "stdio"], "env": {"FUSION_TEST_TOKEN": %[4]q}},
		"fs": {"command": %[1]q, "args": [%[3]q, "${NOTES}"]}}}`, nodeBin, everything, filesystem, secret)
	code, raw := mcpAdmin(t, n, http.MethodPut, put)
	if code != 200 || bytes.Contains(raw, []byte(secret)) {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.Source != "node" || doc.MCPServers["ev"].Env["FUSION_TEST_TOKEN"] != host.SecretMask ||
		doc.MCPServers["fs"].Args[1] != "${NOTES}" {
		t.Errorf("PUT's answer: %s", raw)
	}
	servers := waitMCP(t, n, "ev and fs ready", func(s map[string]mcpServerDoc) bool {
		return s["ev"].State == "ready" && s["fs"].State == "ready" && s["ev"].PID != ev.PID
	})
	if !gone(ev.PID) {
		t.Errorf("ev's old process %d is still there", ev.PID)
	}
	code, out := execute(t, n, "read_text_file", map[string]any{"path": filepath.Join(dir, "note.txt")})
	if texts := content(out, "text"); code != 200 || len(texts) != 1 || texts[0]["text"] != "admin was here\n" {
		t.Errorf("the added server's tool: %d %v", code, out)
	}
	getEnv := func() string {
		code, out := execute(t, n, "get-env", nil)
		if texts := content(out, "text"); code == 200 && len(texts) == 1 {
			return texts[0]["text"].(string)
		}
		t.Fatalf("get-env: %d %v", code, out)
		return ""
	}
	if !strings.Contains(getEnv(), secret) {
		t.Error("ev runs without the secret of its new entry")
	}

	// GET shows the mask; sent back without fs, the mask keeps the secret
	// (ev's entry is then unchanged: same process) and fs's process ends.
	doc, raw = mcpAdminGet(t, n)
	if bytes.Contains(raw, []byte(secret)) || doc.Status["fs"][0].State != host.StateReady {
		t.Fatalf("GET: %s", raw)
	}
	var edit struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(raw, &edit); err != nil {
		t.Fatal(err)
	}
	delete(edit.MCPServers, "fs")
	back, _ := json.Marshal(edit)
	if !bytes.Contains(back, []byte(host.SecretMask)) {
		t.Fatalf("the document sent back has no mask: %s", back)
	}
	if code, raw := mcpAdmin(t, n, http.MethodPut, string(back)); code != 200 {
		t.Fatalf("PUT back: %d %s", code, raw)
	}
	after := mcpServers(t, n)
	if _, ok := after["fs"]; ok || !gone(servers["fs"].PID) {
		t.Errorf("fs after it was dropped: %+v, process %d gone %v", after["fs"], servers["fs"].PID, gone(servers["fs"].PID))
	}
	if after["ev"].PID != servers["ev"].PID {
		t.Errorf("ev restarted (pid %d → %d): the mask did not stand for the stored secret", servers["ev"].PID, after["ev"].PID)
	}
	if !strings.Contains(getEnv(), secret) {
		t.Error("ev lost its secret")
	}
	if strings.Contains(logs.String(), secret) {
		t.Error("a log line holds the secret")
	}

	// The stored configuration outlives a restart; the file given again
	// is not read over it.
	if err := n.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	fileWithFS, err := host.ParseConfig([]byte(fmt.Sprintf(`{"mcpServers": {"fs": {"command": %q, "args": [%q, %q]}}}`, nodeBin, filesystem, dir)), nil)
	if err != nil {
		t.Fatal(err)
	}
	again := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: fileWithFS, DataDir: dataDir})
	if doc, _ := mcpAdminGet(t, again); doc.Source != "node" || len(doc.MCPServers) != 1 || doc.MCPServers["ev"].Env["FUSION_TEST_TOKEN"] != host.SecretMask {
		t.Errorf("after a restart: %+v", doc)
	}
	waitMCP(t, again, "ev ready after a restart", func(s map[string]mcpServerDoc) bool { _, fs := s["fs"]; return s["ev"].State == "ready" && !fs })
}

// TestMCPAdminConfigCluster: a PUT on node a is replicated through Raft;
// the server it names for node c starts there, its tools are listed and
// run from b, GET on b shows it as c's; a PUT without it stops it on c,
// leaving no process.
func TestMCPAdminConfigCluster(t *testing.T) {
	nodeBin, everything := mcptest.Everything(t)
	models := nodetest.Models(t)
	grace := host.Options{TerminateGrace: 500 * time.Millisecond}
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("a", 1, nil), MCP: grace})
	join := []string{a.Cluster().GossipAddr()}
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("b", 0, join), MCP: grace})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("c", 0, join), MCP: grace})

	put := fmt.Sprintf(`{"mcpServers": {"ev": {"command": %q, "args": [%q, "stdio"], "env": {"T": "s3cr3t-cluster"}, "nodes": ["c"]}}}`, nodeBin, everything)
	if code, raw := mcpAdmin(t, a, http.MethodPut, put); code != 200 {
		t.Fatalf("PUT on a: %d %s", code, raw)
	}
	waitMCP(t, b, "ev ready on c, seen from b", func(s map[string]mcpServerDoc) bool { return s["ev"].State == "ready" })
	local := c.MCP().Servers()
	if len(local) != 1 || local[0].State != host.StateReady || local[0].PID == 0 {
		t.Fatalf("c's own servers: %+v", local)
	}
	pid := local[0].PID
	for _, n := range []*node.Node{a, b} {
		if st := n.MCP().Servers(); len(st) != 1 || st[0].State != host.StateRemote {
			t.Errorf("a node the entry does not name runs it: %+v", st)
		}
	}
	code, doc := mcpDo(t, b, http.MethodGet, "/v1/mcp/tools", "")
	found := false
	for _, it := range doc["tools"].([]any) {
		if m := it.(map[string]any); m["name"] == "echo" && m["server"] == "ev" {
			found = true
		}
	}
	if code != 200 || !found {
		t.Errorf("tools on b: %d %v", code, doc)
	}
	code, doc = execute(t, b, "echo", map[string]any{"message": "via b"})
	if texts := content(doc, "text"); code != 200 || len(texts) != 1 || texts[0]["text"] != "Echo: via b" {
		t.Errorf("echo through b: %d %v", code, doc)
	}
	got, raw := mcpAdminGet(t, b)
	if got.Source != "cluster" || len(got.Status["ev"]) != 1 || got.Status["ev"][0].Node != "c" || got.Status["ev"][0].State != host.StateReady ||
		got.MCPServers["ev"].Env["T"] != host.SecretMask || bytes.Contains(raw, []byte("s3cr3t-cluster")) {
		t.Errorf("GET on b: %s", raw)
	}

	if code, raw := mcpAdmin(t, b, http.MethodPut, `{"mcpServers": {}}`); code != 200 {
		t.Fatalf("PUT on b: %d %s", code, raw)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(c.MCP().Servers()) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := c.MCP().Servers(); len(st) != 0 || !gone(pid) {
		t.Errorf("after the PUT without it: c's servers %+v, process %d gone %v", st, pid, gone(pid))
	}
	if servers := mcpServers(t, a); len(servers) != 0 {
		t.Errorf("servers seen from a: %+v", servers)
	}
}
