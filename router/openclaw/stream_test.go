package openclaw

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"fusion/router/openai"
)

// TestWriteChange checks the events of each change, including a turn
// whose store did not carry the answer (rebuilt from the history).
func TestWriteChange(t *testing.T) {
	s := &Session{ID: "s", TurnCount: 1}
	call := json.RawMessage(`{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Tokyo\"}"}}]}`)
	out := "/srv/notes"
	running := openai.MCPCall{ID: "m1", Type: "mcp_call", ServerLabel: "fs", Name: "list_allowed_directories", Arguments: "{}", Status: "in_progress"}
	done := running
	done.Status, done.Output = "completed", &out
	mcpStart := "event: tool_call\ndata: {\"session_id\":\"s\",\"turn\":2,\"tool_call\":{\"id\":\"m1\",\"type\":\"function\",\"function\":{\"name\":\"list_allowed_directories\",\"arguments\":\"{}\"}}," +
		"\"mcp_call\":{\"id\":\"m1\",\"type\":\"mcp_call\",\"server_label\":\"fs\",\"name\":\"list_allowed_directories\",\"arguments\":\"{}\",\"status\":\"in_progress\",\"output\":null,\"error\":null}}\n\n"
	mcpDone := "event: tool_result\ndata: {\"session_id\":\"s\",\"tool_call_id\":\"m1\",\"result\":\"/srv/notes\",\"turn\":2,\"is_error\":false," +
		"\"mcp_call\":{\"id\":\"m1\",\"type\":\"mcp_call\",\"server_label\":\"fs\",\"name\":\"list_allowed_directories\",\"arguments\":\"{}\",\"status\":\"completed\",\"output\":\"/srv/notes\",\"error\":null}}\n\n"
	withMCP := json.RawMessage(`{"content":"ok","tool_calls":[],"mcp_calls":[{"id":"m1","type":"mcp_call","server_label":"fs","name":"list_allowed_directories","arguments":"{}","status":"completed","output":"/srv/notes","error":null}]}`)
	mcpHist := []json.RawMessage{json.RawMessage(`{"role":"user","content":"q"}`),
		json.RawMessage(`{"role":"assistant","content":"","tool_calls":[{"id":"m1","type":"function","function":{"name":"list_allowed_directories","arguments":"{}"}}]}`),
		json.RawMessage(`{"role":"tool","tool_call_id":"m1","content":"/srv/notes"}`), json.RawMessage(`{"role":"assistant","content":"ok"}`)}
	tests := []struct {
		name  string
		c     Change
		shown []string // MCP calls the stream showed as they ran
		want  string
	}{
		{"mcp call starts", Change{Kind: MCPStepped, Session: s, Step: &MCPStep{Turn: 2, Call: running}}, nil, mcpStart},
		{"mcp call ends", Change{Kind: MCPStepped, Session: s, Step: &MCPStep{Turn: 2, Call: done}}, nil, mcpDone},
		{"turn end after the calls were shown", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 2, Result: withMCP}}, []string{"m1"},
			"event: turn_end\ndata: " + string(withMCP) + "\n\n"},
		{"turn end shows the calls not seen", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 2, Result: withMCP}}, nil,
			mcpStart + mcpDone + "event: turn_end\ndata: " + string(withMCP) + "\n\n"},
		{"turn end rebuilt with mcp calls", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 2, Messages: mcpHist}}, nil,
			strings.ReplaceAll(mcpStart+mcpDone, `"server_label":"fs"`, `"server_label":""`) +
				"event: turn_end\ndata: {\"content\":\"ok\",\"tool_calls\":[],\"finish_reason\":\"\",\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0},\"session_id\":\"s\",\"turn\":2}\n\n"},
		{"turn start", Change{Kind: TurnBegan, Session: s}, nil, "event: turn_start\ndata: {\"session_id\":\"s\",\"turn\":2}\n\n"},
		{"turn end with its answer", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 1, Result: json.RawMessage(`{"content":"hi","tool_calls":[]}`)}}, nil,
			"event: turn_end\ndata: {\"content\":\"hi\",\"tool_calls\":[]}\n\n"},
		{"turn end rebuilt", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 1, Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"q"}`), call}}}, nil,
			"event: tool_call\ndata: {\"session_id\":\"s\",\"turn\":1,\"tool_call\":{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Tokyo\\\"}\"}}}\n\n" +
				"event: turn_end\ndata: {\"content\":\"Checking.\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Tokyo\\\"}\"}}],\"finish_reason\":\"tool_calls\",\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0},\"session_id\":\"s\",\"turn\":1}\n\n"},
		{"failed turn", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 2, Failed: true}}, nil,
			"event: turn_end\ndata: {\"session_id\":\"s\",\"turn\":2,\"error\":\"the turn failed\"}\n\n"},
		{"tool result", Change{Kind: Edited, Session: s, Edit: &Edit{Mode: EditAppend, ToolCallID: "c1", Message: json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"22C"}`)}}, nil,
			"event: tool_result\ndata: {\"session_id\":\"s\",\"tool_call_id\":\"c1\",\"result\":\"22C\"}\n\n"},
		{"closed", Change{Kind: Closed, Session: s, Reason: ReasonEvicted}, nil, "event: session_closed\ndata: {\"session_id\":\"s\",\"reason\":\"evicted\"}\n\n"},
		{"touch shows nothing", Change{Kind: Touched, Session: s}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			var w http.ResponseWriter = rec
			shown := map[string]bool{}
			for _, id := range tt.shown {
				shown[id] = true
			}
			if err := writeChange(&sse{w: w, rc: http.NewResponseController(w)}, tt.c, shown); err != nil {
				t.Fatal(err)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	// A steering edit sends the new state.
	rec := httptest.NewRecorder()
	if err := writeChange(&sse{w: rec, rc: http.NewResponseController(rec)}, Change{Kind: Edited, Session: s, Edit: &Edit{Mode: EditPrepend}}, map[string]bool{}); err != nil ||
		!strings.HasPrefix(rec.Body.String(), "event: session_state\ndata: {\"session_id\":\"s\",\"turn_count\":1,") {
		t.Fatalf("steer: %v %s", err, rec.Body.String())
	}
}
