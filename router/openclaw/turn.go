package openclaw

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"fusion/engine"
	"fusion/router/dispatch"
	"fusion/router/jsonkind"
	"fusion/router/mcpchat"
	"fusion/router/metrics"
	"fusion/router/openai"
	"fusion/router/requestid"
	"fusion/router/wire"
)

// turn runs one agent turn: the session's system prompt, tools and
// history plus the new input go to the engine as one chat request; the
// input and the answer are appended to the history when it ends.
func (h *Handler) turn(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("session_id")
	if id == "" {
		openai.WriteError(w, openai.MissingParam("session_id"))
		return
	}
	body, e := openai.ReadBody(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	var req turnRequest
	if len(bytes.TrimSpace(body)) > 0 { // an empty body continues the conversation
		if e := openai.DecodeJSON(body, &req); e != nil {
			openai.WriteError(w, e)
			return
		}
	}
	if req.Stream != nil && *req.Stream {
		openai.WriteError(w, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: "stream", Code: "unsupported_parameter",
			Message: "A turn answers as a whole; follow GET /v1/openclaw/agent/stream/{session_id} for its events."})
		return
	}
	if req.N != nil && *req.N != 1 {
		openai.WriteError(w, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: "n", Code: "unsupported_parameter",
			Message: "A turn has one answer: 'n' must be 1."})
		return
	}
	input, e := inputMessages(req.Messages)
	if e != nil {
		openai.WriteError(w, e)
		return
	}

	// Check the request against the session as it is now, so a bad field
	// is a 400 that starts no turn; then start the turn and build the
	// request again from the history the turn begins with.
	s, err := h.store.Get(r.Context(), id)
	if err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	if _, _, e := h.engineRequest(r, &req, s, input); e != nil {
		openai.WriteError(w, e)
		return
	}
	if e := h.roomFor(s, input...); e != nil {
		openai.WriteError(w, e)
		return
	}
	if s, err = h.store.BeginTurn(r.Context(), id); err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	turn := s.TurnCount + 1
	// The turn must end in the store whatever happens, even when the
	// client went away (so not with the request's context).
	ended := false
	fail := func(msg string) {
		if ended {
			return
		}
		ended = true
		data, _ := wire.Marshal(turnFailedEvent{SessionID: id, Turn: turn, Error: msg})
		if _, err := h.store.EndTurn(context.WithoutCancel(r.Context()), id, TurnEnd{Turn: turn, Failed: true, Result: data}); err != nil {
			h.log.LogAttrs(r.Context(), slog.LevelWarn, "openclaw: ending a failed turn", slog.String("session_id", id), slog.Any("err", err))
		}
	}
	defer fail("the turn was interrupted")

	ereq, mcpTools, e := h.engineRequest(r, &req, s, input)
	if e != nil {
		fail(e.Message)
		openai.WriteError(w, e)
		return
	}
	// A session's turns go to the same node (its prefix cache holds the
	// conversation) when the engine is the cluster's dispatcher.
	// Each MCP call the server runs shows on this node's streams as it
	// starts and ends (streams elsewhere get them with the turn's end).
	step := func(c openai.MCPCall) {
		h.hub.publish(Change{Kind: MCPStepped, Session: s, Step: &MCPStep{Turn: turn, Call: c}})
	}
	res, err := h.generate(dispatch.WithSession(r.Context(), id), ereq, mcpTools, step)
	if err != nil {
		oe := openai.EngineError(err, s.Model)
		fail(oe.Message)
		openai.WriteError(w, oe)
		return
	}
	res.SessionID, res.Turn = id, turn

	// The MCP calls the server ran go into the history as the model made
	// them (one assistant message with the calls, a tool message with
	// each result), before the answer, so later turns see the results.
	answers := mcpHistory(res.MCPCalls)
	answer := map[string]any{"role": "assistant", "content": res.Content}
	if res.ReasoningContent != nil {
		answer["reasoning_content"] = *res.ReasoningContent
	}
	if len(res.ToolCalls) > 0 {
		answer["tool_calls"] = res.ToolCalls
	}
	am, _ := wire.Marshal(answer)
	answers = append(answers, am)
	if e := h.roomFor(s, append(input, answers...)...); e != nil {
		fail(e.Message)
		openai.WriteError(w, e)
		return
	}
	data, _ := wire.Marshal(res)
	ended = true
	if _, err := h.store.EndTurn(context.WithoutCancel(r.Context()), id, TurnEnd{Turn: turn, Messages: append(input, answers...), Result: data}); err != nil {
		openai.WriteError(w, storeError(err, id))
		return
	}
	h.write(w, res)
}

// inputMessages checks a turn's messages: absent, null or [] (continue
// the conversation) or chat messages, returned compact one by one.
func inputMessages(raw json.RawMessage) ([]json.RawMessage, *openai.Error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, openai.InvalidType("messages", "an array of message objects", jsonkind.Of(raw))
	}
	if len(list) == 0 {
		return nil, nil
	}
	if _, e := openai.ParseMessages(raw); e != nil {
		return nil, e
	}
	out := make([]json.RawMessage, len(list))
	for i, m := range list {
		var buf bytes.Buffer
		_ = json.Compact(&buf, m)
		out[i] = buf.Bytes()
	}
	return out, nil
}

// engineRequest builds the turn's engine request through the chat API's
// converter, so sampling, max_tokens, tool_choice and response_format are
// checked exactly as /v1/chat/completions checks them.
func (h *Handler) engineRequest(r *http.Request, req *turnRequest, s *Session, input []json.RawMessage) (*engine.Request, *mcpchat.Toolset, *openai.Error) {
	msgs := make([]json.RawMessage, 0, 1+len(s.History)+len(input))
	if s.SystemPrompt != "" {
		sys, _ := wire.Marshal(map[string]string{"role": "system", "content": s.SystemPrompt})
		msgs = append(msgs, sys)
	}
	msgs = append(msgs, s.History...)
	msgs = append(msgs, input...)
	if len(msgs) == 0 {
		return nil, nil, openai.InvalidRequest("messages", "The session has no history yet: the first turn needs at least one message.")
	}
	all, err := json.Marshal(msgs)
	if err != nil {
		return nil, nil, openai.Internal()
	}
	c := *req
	c.Model, c.Messages, c.Tools = s.Model, all, s.Tools
	if c.TaskTag == nil {
		tag := "openclaw" // agent turns are batch work
		c.TaskTag = &tag
	}
	// tool_choice (forced calls too) and response_format go through the
	// chat API's converter to the engine.
	ereq, mcpTools, e := openai.ChatEngineRequest(&c, h.chat, "oc_"+requestid.From(r.Context()), h.mcp)
	if e != nil {
		// The history was checked when it was written; errors come from
		// the new input, whose indices follow the history's.
		return nil, nil, e
	}
	return ereq, mcpTools, nil
}

// generate runs req (through the MCP loop when it has MCP tools) and
// gathers its answer.
func (h *Handler) generate(ctx context.Context, req *engine.Request, mcpTools *mcpchat.Toolset, step func(openai.MCPCall)) (*TurnResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events <-chan engine.Event
	var err error
	if mcpTools != nil {
		events, err = mcpTools.Generate(ctx, h.engine, req)
	} else {
		events, err = h.engine.Generate(ctx, req)
	}
	if err != nil {
		h.metrics.Rejected()
		return nil, err
	}
	g := h.metrics.BeginFor(ctx, req.Model)
	outcome, promptTokens, generated := metrics.Cancelled, 0, 0
	defer func() { g.End(outcome, promptTokens, generated) }()
	defer func() {
		for range events { // let the engine finish after a cancel
		}
	}()
	var text, reasoning strings.Builder
	res := &TurnResult{ToolCalls: []openai.ToolCall{}}
	for ev := range events {
		if ev.Err != nil {
			cancel()
			outcome = metrics.Failed
			return nil, ev.Err
		}
		if ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0 || len(ev.Tokens) > 0 {
			g.FirstToken()
		}
		generated += len(ev.Tokens)
		if st := ev.ServerTool; st != nil {
			c := openai.MCPCallOf(st)
			step(c)
			if st.Done {
				res.MCPCalls = append(res.MCPCalls, c)
			}
		}
		text.WriteString(ev.Text)
		reasoning.WriteString(ev.Reasoning)
		for _, c := range ev.ToolCalls {
			res.ToolCalls = append(res.ToolCalls, openai.ToolCall{ID: c.ID, Type: "function",
				Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
		}
		if ev.Done {
			res.FinishReason = openai.FinishReason(ev.FinishReason)
			res.Usage = TurnUsage{PromptTokens: ev.Usage.PromptTokens, CompletionTokens: ev.Usage.CompletionTokens,
				TotalTokens: ev.Usage.PromptTokens + ev.Usage.CompletionTokens}
			outcome, promptTokens, generated = metrics.OK, ev.Usage.PromptTokens, ev.Usage.CompletionTokens
		}
	}
	if res.FinishReason == "" { // the channel closed without a final event: cancelled
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, context.Canceled
	}
	res.Content = text.String()
	if reasoning.Len() > 0 {
		rc := reasoning.String()
		res.ReasoningContent = &rc
	}
	return res, nil
}

// mcpHistory is the history of a turn's server-run MCP calls: one
// assistant message with the calls, then a tool message with each result.
func mcpHistory(calls []openai.MCPCall) []json.RawMessage {
	if len(calls) == 0 {
		return nil
	}
	var tcs []openai.ToolCall
	var results []json.RawMessage
	for _, c := range calls {
		tcs = append(tcs, openai.ToolCall{ID: c.ID, Type: "function", Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
		out := c.Output
		if out == nil {
			out = c.Error
		}
		text := ""
		if out != nil {
			text = *out
		}
		m, _ := wire.Marshal(map[string]any{"role": "tool", "tool_call_id": c.ID, "content": text})
		results = append(results, m)
	}
	am, _ := wire.Marshal(map[string]any{"role": "assistant", "content": "", "tool_calls": tcs})
	return append([]json.RawMessage{am}, results...)
}
