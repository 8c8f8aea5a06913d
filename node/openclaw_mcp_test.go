package node_test

import (
	"fmt"
	"strings"
	"testing"

	"fusion/node"
	"fusion/node/nodetest"
)

// ocMCPTurn creates a session on n whose tools name fs and runs one turn
// forced to call list_allowed_directories.
func ocMCPTurn(t *testing.T, create, turn *node.Node, streams ...*node.Node) (string, []<-chan ocEvent) {
	t.Helper()
	id := ocOK(t, "create", create, "POST", "/v1/openclaw/agent/sessions", map[string]any{"model": nodetest.Model,
		"tools": []any{map[string]any{"type": "mcp", "server_label": "fs", "allowed_tools": []any{"list_allowed_directories"}}}})["session_id"].(string)
	var chans []<-chan ocEvent
	for _, n := range streams {
		ch := ocStream(t, n, id)
		ocExpect(t, ch, "connected", "session_state")
		chans = append(chans, ch)
	}
	ocOK(t, "turn", turn, "POST", "/v1/openclaw/agent/turns?session_id="+id, map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "Where may you read?"}}, "max_tokens": 60, "seed": 1,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "list_allowed_directories"}}})
	return id, chans
}

// checkMCPEvents reads a turn's events from a stream: turn_start, the MCP
// call as tool_call (with its mcp_call in progress) and its result as
// tool_result (completed, the real server's output), then turn_end.
// server is the mcp_call's server_label the stream must show.
func checkMCPEvents(t *testing.T, what string, ch <-chan ocEvent, dir, server string) {
	t.Helper()
	evs := ocExpect(t, ch, "turn_start", "tool_call", "tool_result", "turn_end")
	call, res := evs[1].data, evs[2].data
	mc, _ := call["mcp_call"].(map[string]any)
	tc, _ := call["tool_call"].(map[string]any)
	fn, _ := tc["function"].(map[string]any)
	if mc == nil || mc["status"] != "in_progress" || mc["name"] != "list_allowed_directories" || mc["server_label"] != server ||
		fn["name"] != "list_allowed_directories" || tc["id"] != mc["id"] {
		t.Errorf("%s: tool_call %v", what, call)
	}
	rc, _ := res["mcp_call"].(map[string]any)
	if rc == nil || rc["status"] != "completed" || res["tool_call_id"] != tc["id"] || res["is_error"] != false ||
		!strings.Contains(fmt.Sprint(res["result"]), dir) || rc["server_label"] != server {
		t.Errorf("%s: tool_result %v", what, res)
	}
}

// TestOpenClawMCPEvents: the event stream of a session shows each MCP
// call the server runs in a turn, with its result, before the turn ends.
func TestOpenClawMCPEvents(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	_, chans := ocMCPTurn(t, n, n, n)
	checkMCPEvents(t, "lone node", chans[0], dir, "fs")
}

// TestOpenClawMCPEventsCluster: three nodes, the MCP server on a only, the
// session made on c and its turn sent to b. A stream on b (which runs the
// MCP loop) shows each call as it runs — with its server, which only the
// live step knows; a stream on c gets the same calls from the replicated
// history when the turn ends (without the server's name).
func TestOpenClawMCPEventsCluster(t *testing.T) {
	cfg, dir := fsConfig(t)
	models := nodetest.Models(t)
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("a", 3, nil), MCPServers: cfg})
	join := []string{a.Cluster().GossipAddr()}
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("b", 3, join)})
	c := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member("c", 3, join)})
	ocLeader(t, []*node.Node{a, b, c})
	waitMCP(t, b, "fs ready on a, seen from b", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	_, chans := ocMCPTurn(t, c, b, b, c)
	checkMCPEvents(t, "the node running the turn", chans[0], dir, "fs")
	checkMCPEvents(t, "another node", chans[1], dir, "")
}
