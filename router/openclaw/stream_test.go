package openclaw

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWriteChange checks the events of each change, including a turn
// whose store did not carry the answer (rebuilt from the history).
func TestWriteChange(t *testing.T) {
	s := &Session{ID: "s", TurnCount: 1}
	call := json.RawMessage(`{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Tokyo\"}"}}]}`)
	tests := []struct {
		name string
		c    Change
		want string
	}{
		{"turn start", Change{Kind: TurnBegan, Session: s}, "event: turn_start\ndata: {\"session_id\":\"s\",\"turn\":2}\n\n"},
		{"turn end with its answer", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 1, Result: json.RawMessage(`{"content":"hi","tool_calls":[]}`)}},
			"event: turn_end\ndata: {\"content\":\"hi\",\"tool_calls\":[]}\n\n"},
		{"turn end rebuilt", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 1, Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"q"}`), call}}},
			"event: tool_call\ndata: {\"session_id\":\"s\",\"turn\":1,\"tool_call\":{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Tokyo\\\"}\"}}}\n\n" +
				"event: turn_end\ndata: {\"content\":\"Checking.\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Tokyo\\\"}\"}}],\"finish_reason\":\"tool_calls\",\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0},\"session_id\":\"s\",\"turn\":1}\n\n"},
		{"failed turn", Change{Kind: TurnEnded, Session: s, TurnEnd: &TurnEnd{Turn: 2, Failed: true}},
			"event: turn_end\ndata: {\"session_id\":\"s\",\"turn\":2,\"error\":\"the turn failed\"}\n\n"},
		{"tool result", Change{Kind: Edited, Session: s, Edit: &Edit{Mode: EditAppend, ToolCallID: "c1", Message: json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"22C"}`)}},
			"event: tool_result\ndata: {\"session_id\":\"s\",\"tool_call_id\":\"c1\",\"result\":\"22C\"}\n\n"},
		{"closed", Change{Kind: Closed, Session: s, Reason: ReasonEvicted}, "event: session_closed\ndata: {\"session_id\":\"s\",\"reason\":\"evicted\"}\n\n"},
		{"touch shows nothing", Change{Kind: Touched, Session: s}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			var w http.ResponseWriter = rec
			if err := writeChange(&sse{w: w, rc: http.NewResponseController(w)}, tt.c); err != nil {
				t.Fatal(err)
			}
			if got := rec.Body.String(); got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	// A steering edit sends the new state.
	rec := httptest.NewRecorder()
	if err := writeChange(&sse{w: rec, rc: http.NewResponseController(rec)}, Change{Kind: Edited, Session: s, Edit: &Edit{Mode: EditPrepend}}); err != nil ||
		!strings.HasPrefix(rec.Body.String(), "event: session_state\ndata: {\"session_id\":\"s\",\"turn_count\":1,") {
		t.Fatalf("steer: %v %s", err, rec.Body.String())
	}
}
