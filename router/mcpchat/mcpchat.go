// Package mcpchat runs the MCP tools a chat request asks for: a chat
// completion, a Messages call or an OpenClaw turn names MCP servers (and
// optionally some of their tools), the server offers those tools to the
// model, runs the model's calls of them on the MCP host (on whichever
// node has the server ready), feeds the results back and lets the model
// continue, until it answers without calling one or the step limit is
// reached.
//
// It works at the level of the engine's neutral request and events, so
// each dialect only parses its way of naming the servers and shows the
// calls; every model turn goes through the node's generator (the
// dispatcher in a cluster), so it is forwarded to where the model is hot.
package mcpchat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/mcp/host"
	"fusion/router/jsonkind"
)

// DefaultMaxSteps is the number of model turns a request may take when
// Runner.MaxSteps is 0.
const DefaultMaxSteps = 8

// Runner resolves a request's MCP servers into tools and runs the loop.
// A nil Runner, or one without a host, has no servers.
type Runner struct {
	Host host.Provider
	// MaxSteps bounds the model turns of one request (default 8): when
	// the last one still calls MCP tools, they are run and the answer
	// ends with engine.FinishToolStepLimit.
	MaxSteps int
}

// Ref is a request's ask for the tools of one MCP server.
type Ref struct {
	Server string
	// Allowed names the server's tools the model may use (its own names
	// or the listed ones); nil allows every tool of the server.
	Allowed []string
	// Param is where the request named the server ("tools[2]"), for
	// errors; the server is Param+".server_label" or what Field says.
	Param string
	// Field and AllowedField name the server and allowed-tools fields in
	// errors (default "server_label", "allowed_tools").
	Field, AllowedField string
}

// RefError is an ask that cannot be met: an unknown server or tool (a
// 400 naming Param), or a server that is not ready now (NotReady: a 503).
type RefError struct {
	Param    string
	Msg      string
	NotReady bool
}

func (e *RefError) Error() string { return e.Param + ": " + e.Msg }

// Toolset is the MCP tools of one request.
type Toolset struct {
	host     host.Provider
	maxSteps int
	byName   map[string]host.Tool // by the name the model sees
	defs     []*chattemplate.Object
}

// Resolve finds the tools refs ask for among the host's ready servers.
func (r *Runner) Resolve(refs []Ref) (*Toolset, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	if r == nil || r.Host == nil {
		ref := refs[0]
		return nil, &RefError{Param: ref.param(), Msg: fmt.Sprintf("no MCP server '%s': this server has no MCP servers configured.", ref.Server)}
	}
	steps := r.MaxSteps
	if steps <= 0 {
		steps = DefaultMaxSteps
	}
	ts := &Toolset{host: r.Host, maxSteps: steps, byName: map[string]host.Tool{}}
	states := map[string][]host.ServerStatus{}
	for _, s := range r.Host.Servers() {
		states[s.Name] = append(states[s.Name], s)
	}
	tools := r.Host.Tools()
	for _, ref := range refs {
		st, known := states[ref.Server]
		if !known {
			return nil, &RefError{Param: ref.param(), Msg: fmt.Sprintf("no MCP server '%s' is configured (GET /v1/mcp/servers lists them).", ref.Server)}
		}
		if !slices.ContainsFunc(st, func(s host.ServerStatus) bool { return s.State == host.StateReady }) {
			msg := fmt.Sprintf("the MCP server '%s' is not ready (%s)", ref.Server, st[0].State)
			if st[0].LastError != "" {
				msg += ": " + st[0].LastError
			}
			return nil, &RefError{Param: ref.param(), Msg: msg + ".", NotReady: true}
		}
		found := map[string]bool{}
		for _, t := range tools {
			if t.Server != ref.Server {
				continue
			}
			if ref.Allowed != nil && !slices.Contains(ref.Allowed, t.ServerTool) && !slices.Contains(ref.Allowed, t.Name) {
				continue
			}
			found[t.ServerTool], found[t.Name] = true, true
			if _, dup := ts.byName[t.Name]; dup {
				continue
			}
			def, err := definition(t)
			if err != nil {
				return nil, err
			}
			ts.byName[t.Name] = t
			ts.defs = append(ts.defs, def)
		}
		for _, name := range ref.Allowed {
			if !found[name] {
				field := ref.AllowedField
				if field == "" {
					field = "allowed_tools"
				}
				return nil, &RefError{Param: ref.Param + "." + field,
					Msg: fmt.Sprintf("the MCP server '%s' has no tool '%s' (GET /v1/mcp/tools lists them).", ref.Server, name)}
			}
		}
	}
	return ts, nil
}

func (ref Ref) param() string {
	f := ref.Field
	if f == "" {
		f = "server_label"
	}
	if ref.Param == "" {
		return f
	}
	return ref.Param + "." + f
}

// definition is a tool as the chat template takes it: an OpenAI function.
func definition(t host.Tool) (*chattemplate.Object, error) {
	fn := chattemplate.NewObject("name", t.Name)
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc != "" {
		fn.Set("description", desc)
	}
	params := any(chattemplate.NewObject("type", "object", "properties", &chattemplate.Object{}))
	if t.InputSchema != nil {
		raw, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("mcpchat: tool %s: schema: %w", t.Name, err)
		}
		if params, err = chattemplate.DecodeJSON(raw); err != nil {
			return nil, fmt.Errorf("mcpchat: tool %s: schema: %w", t.Name, err)
		}
	}
	fn.Set("parameters", params)
	return chattemplate.NewObject("type", "function", "function", fn), nil
}

// Definitions are the tools to add to the request's, in the chat
// template's shape.
func (ts *Toolset) Definitions() []*chattemplate.Object { return ts.defs }

// Names are the tools' names as the model sees them.
func (ts *Toolset) Names() []string {
	out := make([]string, 0, len(ts.byName))
	for _, d := range ts.defs {
		fv, _ := d.Get("function")
		n, _ := fv.(*chattemplate.Object).Get("name")
		out = append(out, n.(string))
	}
	return out
}

// Clash returns the first of tools (function definitions of the request)
// whose name is one of the set's, or "".
func (ts *Toolset) Clash(tools []*chattemplate.Object) string {
	for _, t := range tools {
		fv, _ := t.Get("function")
		if fn, ok := fv.(*chattemplate.Object); ok {
			if n, _ := fn.Get("name"); n != nil {
				if name, ok := n.(string); ok && ts.Has(name) {
					return name
				}
			}
		}
	}
	return ""
}

// HasServer reports whether the set has tools of server.
func (ts *Toolset) HasServer(server string) bool {
	for _, t := range ts.byName {
		if t.Server == server {
			return true
		}
	}
	return false
}

// OnlyServer reports whether every tool of the set is server's.
func (ts *Toolset) OnlyServer(server string) bool {
	for _, t := range ts.byName {
		if t.Server != server {
			return false
		}
	}
	return true
}

// Find returns the name the model sees for server's tool name (its name
// on the server, or the name it is listed under).
func (ts *Toolset) Find(server, name string) (string, bool) {
	for listed, t := range ts.byName {
		if t.Server == server && (t.ServerTool == name || listed == name) {
			return listed, true
		}
	}
	return "", false
}

// Has reports whether name is one of the set's tools.
func (ts *Toolset) Has(name string) bool {
	_, ok := ts.byName[name]
	return ok
}

// Generate runs req (whose Tools include the set's definitions) through
// gen and runs the model's MCP calls, turn after turn. The events are
// those of the turns — text, reasoning, the client's own tool calls — plus
// a ServerTool event when each MCP call starts and one with its result,
// and one final event: the last turn's, with the usage of every turn
// summed and FinishToolStepLimit when the steps ran out. A forced
// tool_choice applies to the first turn only (after it the model is free
// to answer). Only the first turn's refusal is returned as an error; a
// later turn's is an error event.
func (ts *Toolset) Generate(ctx context.Context, gen engine.Generator, req *engine.Request) (<-chan engine.Event, error) {
	first, err := gen.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make(chan engine.Event, 16)
	go func() {
		defer close(out)
		ts.loop(ctx, gen, req, first, out)
	}()
	return out, nil
}

func (ts *Toolset) loop(ctx context.Context, gen engine.Generator, req *engine.Request, events <-chan engine.Event, out chan<- engine.Event) {
	send := func(ev engine.Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	msgs := slices.Clone(req.Messages)
	var total engine.Usage
	for step := 1; ; step++ {
		var text, reasoning strings.Builder
		var mine []engine.ToolCall
		var final engine.Event
		clientCalls := false
		ok := true
		for ev := range events {
			if !ok {
				continue // drain after the client left
			}
			if ev.Err != nil {
				ok = send(ev)
				continue
			}
			text.WriteString(ev.Text)
			reasoning.WriteString(ev.Reasoning)
			var theirs []engine.ToolCall
			for _, tc := range ev.ToolCalls {
				if ts.Has(tc.Name) {
					mine = append(mine, tc)
				} else {
					theirs = append(theirs, tc)
				}
			}
			ev.ToolCalls = theirs
			clientCalls = clientCalls || len(theirs) > 0
			if ev.Done {
				// The final event's own output goes out now; the final
				// event itself only when the answer ends.
				final = engine.Event{Done: true, FinishReason: ev.FinishReason, StopSequence: ev.StopSequence, Usage: ev.Usage}
				ev = engine.Event{Text: ev.Text, Reasoning: ev.Reasoning, ToolCalls: ev.ToolCalls, Tokens: ev.Tokens, TopLogprobs: ev.TopLogprobs}
			}
			if ev.Text != "" || ev.Reasoning != "" || len(ev.ToolCalls) > 0 || len(ev.Tokens) > 0 || ev.Usage != (engine.Usage{}) {
				ok = send(ev)
			}
		}
		if !ok || !final.Done {
			return // an error was sent, or the client left
		}
		total = addUsage(total, final.Usage)
		final.Usage = total
		if len(mine) == 0 {
			send(final)
			return
		}
		var more bool
		if msgs, more = ts.run(ctx, send, msgs, text.String(), reasoning.String(), mine); !more {
			return
		}
		// Calls the client runs end the answer: the next turn needs their
		// results, which only the client can give.
		if clientCalls {
			final.FinishReason = engine.FinishToolCalls
			send(final)
			return
		}
		if step >= ts.maxSteps {
			final.FinishReason = engine.FinishToolStepLimit
			final.StopSequence = ""
			send(final)
			return
		}
		next := *req
		next.ID = fmt.Sprintf("%s-mcp%d", req.ID, step+1)
		next.Messages = slices.Clone(msgs)
		next.ContinueFinal = false
		next.ToolChoice = engine.ToolChoice{NoParallel: req.ToolChoice.NoParallel}
		ch, err := gen.Generate(ctx, &next)
		if err != nil {
			send(engine.Event{Err: err})
			return
		}
		events = ch
	}
}

// run runs a turn's MCP calls, showing each call and result, and returns
// the history with the turn and the results appended; false when the
// client left.
func (ts *Toolset) run(ctx context.Context, send func(engine.Event) bool, msgs []*chattemplate.Object, text, reasoning string, mine []engine.ToolCall) ([]*chattemplate.Object, bool) {
	assistant := chattemplate.NewObject("role", "assistant", "content", text)
	if reasoning != "" {
		assistant.Set("reasoning_content", reasoning)
	}
	calls := make([]any, len(mine))
	for i, tc := range mine {
		calls[i] = chattemplate.NewObject("id", tc.ID, "type", "function",
			"function", chattemplate.NewObject("name", tc.Name, "arguments", arguments(tc)))
	}
	assistant.Set("tool_calls", calls)
	msgs = append(msgs, assistant)
	for _, tc := range mine {
		t := ts.byName[tc.Name]
		call := &engine.ServerToolStep{ID: tc.ID, Server: t.Server, Name: t.ServerTool, Arguments: arguments(tc)}
		if !send(engine.Event{ServerTool: call}) {
			return nil, false
		}
		res := *call
		res.Done = true
		res.Output, res.IsError = ts.call(ctx, t, call.Arguments)
		if ctx.Err() != nil || !send(engine.Event{ServerTool: &res}) {
			return nil, false
		}
		msgs = append(msgs, chattemplate.NewObject("role", "tool", "tool_call_id", tc.ID, "content", res.Output))
	}
	return msgs, true
}

// call runs one MCP call and returns what the model is shown: the
// result's text, or the error (a failed call is the tool's failure for
// the model, not the request's).
func (ts *Toolset) call(ctx context.Context, t host.Tool, rawArgs string) (string, bool) {
	args := map[string]any{}
	if err := json.Unmarshal([]byte(rawArgs), &args); err != nil {
		return fmt.Sprintf("error: the arguments are not a JSON object: %v", err), true
	}
	res, _, err := ts.host.Call(ctx, host.QualifiedName(t.Server, t.ServerTool), args)
	if err != nil {
		var ae *host.ArgumentError
		if errors.As(err, &ae) {
			return fmt.Sprintf("error: invalid arguments: %s", ae.Error()), true
		}
		return "error: " + err.Error(), true
	}
	return ResultText(res), res.IsError
}

// ResultText is a tool result as text for the model: its text items, the
// text of embedded text resources, a line naming each other item, and the
// structured content as JSON when there is nothing else.
func ResultText(res *sdk.CallToolResult) string {
	var parts []string
	for _, item := range res.Content {
		switch c := item.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.URI, c.Name))
		case *sdk.EmbeddedResource:
			if rc := c.Resource; rc != nil {
				if rc.Blob != nil {
					parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes]", rc.URI, rc.MIMEType, len(rc.Blob)))
				} else {
					parts = append(parts, rc.Text)
				}
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}

// arguments is a call's arguments, "{}" when the engine gave none.
func arguments(tc engine.ToolCall) string {
	if tc.Arguments == "" {
		return "{}"
	}
	return tc.Arguments
}

func addUsage(a, b engine.Usage) engine.Usage {
	return engine.Usage{PromptTokens: a.PromptTokens + b.PromptTokens, CompletionTokens: a.CompletionTokens + b.CompletionTokens,
		CachedTokens: a.CachedTokens + b.CachedTokens, CacheWriteTokens: a.CacheWriteTokens + b.CacheWriteTokens}
}

// FieldError is a malformed ask: Param is missing (Want empty) or not of
// the kind Want.
type FieldError struct{ Param, Want, Got string }

// ParseRef reads an ask from one object of a request: the server's name
// under labelKey, the allowed tools (an array of names, or an object with
// tool_names, as OpenAI allows) under the keys of allowedPath. param names
// the object in errors, elem the i-th item of an array in the dialect's
// way ("x[1]" or "x.1").
func ParseRef(t *chattemplate.Object, param, labelKey string, allowedPath []string, elem func(string, int) string) (Ref, *FieldError) {
	ref := Ref{Param: param, Field: labelKey, AllowedField: strings.Join(allowedPath, ".")}
	lv, _ := t.Get(labelKey)
	if lv == nil || lv == "" {
		return ref, &FieldError{Param: param + "." + labelKey}
	}
	label, ok := lv.(string)
	if !ok {
		return ref, &FieldError{Param: param + "." + labelKey, Want: "a string", Got: jsonkind.OfValue(lv)}
	}
	ref.Server = label
	var av any = t
	for _, k := range allowedPath {
		obj, ok := av.(*chattemplate.Object)
		if !ok {
			av = nil
			break
		}
		av, _ = obj.Get(k)
	}
	if obj, ok := av.(*chattemplate.Object); ok { // {"tool_names": [...]}
		av, _ = obj.Get("tool_names")
		ref.AllowedField += ".tool_names"
	}
	switch a := av.(type) {
	case nil:
	case []any:
		ref.Allowed = []string{}
		for j, v := range a {
			name, ok := v.(string)
			if !ok {
				return ref, &FieldError{Param: elem(param+"."+ref.AllowedField, j), Want: "a string", Got: jsonkind.OfValue(v)}
			}
			ref.Allowed = append(ref.Allowed, name)
		}
	default:
		return ref, &FieldError{Param: param + "." + ref.AllowedField, Want: "an array of strings", Got: jsonkind.OfValue(av)}
	}
	return ref, nil
}
