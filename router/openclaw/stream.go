package openclaw

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/engine"
	"fusion/router/openai"
	"fusion/router/wire"
)

// Event names of the stream, as the contract lists them.
const (
	EventConnected     = "connected"
	EventSessionState  = "session_state"
	EventTurnStart     = "turn_start"
	EventTurnEnd       = "turn_end"
	EventToolCall      = "tool_call"
	EventToolResult    = "tool_result"
	EventHeartbeat     = "heartbeat"
	EventSessionClosed = "session_closed"
)

// sse writes named server-sent events, flushing each.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sse) event(name string, v any) error {
	b, err := wire.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(name, b)
}

func (s *sse) raw(name string, data []byte) error {
	buf := make([]byte, 0, len(name)+len(data)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, '\n', '\n')
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// stream serves GET /v1/openclaw/agent/stream/{id}: connected and a
// session_state snapshot, then the session's changes as events, a
// heartbeat every interval, and session_closed when the session is
// deleted, expires or is evicted. Opening a stream does not renew the
// session. The events come from the store's changes, so turns served by
// any node of a cluster show here.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	// Watch before reading the snapshot, so no change falls between.
	wt, ok := h.hub.watch(id)
	if !ok {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "shutting_down",
			Message: "This node is shutting down; open the stream on another node."})
		return
	}
	defer h.hub.unwatch(wt)
	s, err := h.store.Get(r.Context(), id)
	if err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Connection", "keep-alive")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sse{w: w, rc: http.NewResponseController(w)}
	if out.event(EventConnected, connectedEvent{SessionID: id, Timestamp: unix(time.Now())}) != nil ||
		out.event(EventSessionState, infoOf(s, false)) != nil {
		return
	}

	// The MCP calls this stream showed as they ran, so the turn's end
	// does not show them again.
	shown := map[string]bool{}
	tick := time.NewTicker(h.opts.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case now := <-tick.C:
			if out.event(EventHeartbeat, heartbeatEvent{Timestamp: unix(now)}) != nil {
				return
			}
		case c, ok := <-wt.ch:
			if !ok { // lagged behind, or the node is draining: the client reconnects
				return
			}
			if writeChange(out, c, shown) != nil || c.Kind == Closed {
				return
			}
		}
	}
}

// writeChange writes the events of one change; shown holds the ids of
// the MCP calls the stream showed while the turn ran.
func writeChange(out *sse, c Change, shown map[string]bool) error {
	id := c.Session.ID
	switch c.Kind {
	case MCPStepped:
		shown[c.Step.Call.ID] = true
		return writeMCPStep(out, id, c.Step.Turn, c.Step.Call)
	case TurnBegan:
		return out.event(EventTurnStart, turnStartEvent{SessionID: id, Turn: c.Session.TurnCount + 1})
	case TurnEnded:
		data := c.TurnEnd.Result
		var res TurnResult
		switch {
		case c.TurnEnd.Failed:
			if len(data) == 0 {
				data, _ = wire.Marshal(turnFailedEvent{SessionID: id, Turn: c.TurnEnd.Turn, Error: "the turn failed"})
			}
		case len(data) == 0 || json.Unmarshal(data, &res) != nil:
			// A store that does not carry the answer (a replicated one
			// may not): rebuild it from the assistant message appended.
			res = resultFromMessages(id, c.TurnEnd.Turn, c.TurnEnd.Messages)
			data, _ = wire.Marshal(res)
		}
		// The server-run MCP calls first (they ran before the answer),
		// for a stream that did not see them run: the turn ran on
		// another node, or before the stream opened.
		calls := res.MCPCalls
		if !c.TurnEnd.Failed && calls == nil {
			calls = mcpCallsFromMessages(c.TurnEnd.Messages)
		}
		for _, mc := range calls {
			if shown[mc.ID] {
				continue
			}
			start := mc
			start.Status, start.Output, start.Error = "in_progress", nil, nil
			if err := writeMCPStep(out, id, c.TurnEnd.Turn, start); err != nil {
				return err
			}
			if err := writeMCPStep(out, id, c.TurnEnd.Turn, mc); err != nil {
				return err
			}
		}
		clear(shown)
		for _, tc := range res.ToolCalls {
			if err := out.event(EventToolCall, toolCallEvent{SessionID: id, Turn: c.TurnEnd.Turn, ToolCall: tc}); err != nil {
				return err
			}
		}
		return out.raw(EventTurnEnd, data)
	case Edited:
		if c.Edit.ToolCallID != "" {
			var m struct {
				Content string `json:"content"`
			}
			_ = json.Unmarshal(c.Edit.Message, &m)
			return out.event(EventToolResult, toolResultEvent{SessionID: id, ToolCallID: c.Edit.ToolCallID, Result: m.Content})
		}
		return out.event(EventSessionState, infoOf(c.Session, false))
	case Closed:
		return out.event(EventSessionClosed, sessionClosedEvent{SessionID: id, Reason: c.Reason})
	}
	return nil // Created and Touched change nothing a stream shows
}

// resultFromMessages rebuilds a turn's answer from the last assistant
// message it appended (usage and finish reason are not in the history).
func resultFromMessages(id string, turn int, msgs []json.RawMessage) TurnResult {
	res := TurnResult{SessionID: id, Turn: turn, ToolCalls: []openai.ToolCall{}}
	for i := len(msgs) - 1; i >= 0; i-- {
		var m struct {
			Role             string            `json:"role"`
			Content          *string           `json:"content"`
			ReasoningContent *string           `json:"reasoning_content"`
			ToolCalls        []openai.ToolCall `json:"tool_calls"`
		}
		if json.Unmarshal(msgs[i], &m) != nil || m.Role != "assistant" {
			continue
		}
		if m.Content != nil {
			res.Content = *m.Content
		}
		res.ReasoningContent = m.ReasoningContent
		if len(m.ToolCalls) > 0 {
			res.ToolCalls = m.ToolCalls
			res.FinishReason = string(engine.FinishToolCalls)
		}
		break
	}
	return res
}

// writeMCPStep shows one step of a server-run MCP call with the
// contract's tool-call events: its start as tool_call, its result as
// tool_result, each with the call as OpenAI Responses' mcp_call item
// (server_label, status, output or error), which also tells them from the
// client's own calls.
func writeMCPStep(out *sse, id string, turn int, c openai.MCPCall) error {
	if c.Status == "in_progress" {
		return out.event(EventToolCall, toolCallEvent{SessionID: id, Turn: turn, MCPCall: &c,
			ToolCall: openai.ToolCall{ID: c.ID, Type: "function", Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}}})
	}
	result, isError := "", c.Status == "failed"
	switch {
	case c.Output != nil:
		result = *c.Output
	case c.Error != nil:
		result = *c.Error
	}
	return out.event(EventToolResult, toolResultEvent{SessionID: id, Turn: turn, ToolCallID: c.ID, Result: result, IsError: &isError, MCPCall: &c})
}

// mcpCallsFromMessages finds the server-run MCP calls of a turn in the
// messages it appended (a store that does not carry the turn's answer):
// the assistant message with the calls and their tool messages that the
// turn puts just before its answer (mcpHistory). The server each ran on
// is not in the history.
func mcpCallsFromMessages(msgs []json.RawMessage) []openai.MCPCall {
	type message struct {
		Role       string            `json:"role"`
		Content    *string           `json:"content"`
		ToolCalls  []openai.ToolCall `json:"tool_calls"`
		ToolCallID string            `json:"tool_call_id"`
	}
	if len(msgs) < 3 {
		return nil
	}
	// Back from the answer (the last message): the tool results, then
	// the assistant message that made exactly those calls.
	results := map[string]string{}
	i := len(msgs) - 2
	for ; i >= 0; i-- {
		var m message
		if json.Unmarshal(msgs[i], &m) != nil || m.Role != "tool" {
			break
		}
		text := ""
		if m.Content != nil {
			text = *m.Content
		}
		results[m.ToolCallID] = text
	}
	var m message
	if i < 0 || len(results) == 0 || json.Unmarshal(msgs[i], &m) != nil || m.Role != "assistant" || len(m.ToolCalls) != len(results) {
		return nil
	}
	out := make([]openai.MCPCall, 0, len(m.ToolCalls))
	for _, tc := range m.ToolCalls {
		text, ok := results[tc.ID]
		if !ok {
			return nil
		}
		out = append(out, openai.MCPCall{ID: tc.ID, Type: "mcp_call", Name: tc.Function.Name, Arguments: tc.Function.Arguments,
			Status: "completed", Output: &text})
	}
	return out
}
