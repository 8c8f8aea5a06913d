package node_test

import (
	"fmt"
	"net/http"
	"testing"

	"fusion/node/nodetest"
)

// TestChatMCPToolChoice: OpenAI Responses' tool_choice {"type": "mcp",
// "server_label", "name"?} forces a call of that MCP server's tool, which
// the server runs; asks it cannot meet are 400s naming the field.
func TestChatMCPToolChoice(t *testing.T) {
	cfg, dir := fsConfig(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", MCPServers: cfg})
	waitMCP(t, n, "fs ready", func(s map[string]mcpServerDoc) bool { return s["fs"].State == "ready" })
	body := func(tools, choice string) string {
		return fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "Which directories may you read?"}],
			"tools": %s, "tool_choice": %s, "max_tokens": 120, "seed": 1}`, nodetest.Model, tools, choice)
	}
	for _, tc := range []struct{ name, tools, choice string }{
		{"by name", `[{"type": "mcp", "server_label": "fs"}]`, `{"type": "mcp", "server_label": "fs", "name": "list_allowed_directories"}`},
		{"the server's only tool", `[{"type": "mcp", "server_label": "fs", "allowed_tools": ["list_allowed_directories"]}]`, `{"type": "mcp", "server_label": "fs"}`},
	} {
		calls, _ := chatMCP(t, n, body(tc.tools, tc.choice))
		if len(calls) == 0 {
			t.Fatalf("%s: no MCP call", tc.name)
		}
		checkListCall(t, tc.name, calls[0], dir)
	}
	fn := `{"type": "function", "function": {"name": "mine", "parameters": {"type": "object"}}}`
	for _, tc := range []struct{ tools, choice, param string }{
		{`[{"type": "mcp", "server_label": "fs"}]`, `{"type": "mcp", "server_label": "git"}`, "tool_choice.server_label"},
		{`[{"type": "mcp", "server_label": "fs"}]`, `{"type": "mcp"}`, "tool_choice.server_label"},
		{`[{"type": "mcp", "server_label": "fs"}]`, `{"type": "mcp", "server_label": "fs", "name": "rm_rf"}`, "tool_choice.name"},
		{`[{"type": "mcp", "server_label": "fs"}]`, `{"type": "mcp", "server_label": "fs", "name": 7}`, "tool_choice.name"},
		{`[{"type": "mcp", "server_label": "fs", "allowed_tools": ["read_text_file"]}]`, `{"type": "mcp", "server_label": "fs", "name": "list_allowed_directories"}`, "tool_choice.name"},
		{`[` + fn + `, {"type": "mcp", "server_label": "fs"}]`, `{"type": "mcp", "server_label": "fs"}`, "tool_choice.name"},
		{`[` + fn + `]`, `{"type": "mcp", "server_label": "fs", "name": "list_allowed_directories"}`, "tool_choice.server_label"},
		{`[` + fn + `]`, `{"type": "websearch"}`, "tool_choice.type"},
	} {
		code, doc := mcpDo(t, n, http.MethodPost, "/v1/chat/completions", body(tc.tools, tc.choice))
		e, _ := doc["error"].(map[string]any)
		if code != 400 || e == nil || e["param"] != tc.param || e["message"] == "" {
			t.Errorf("tools %s, tool_choice %s: %d %v, want 400 naming %s", tc.tools, tc.choice, code, doc, tc.param)
		}
	}
}
