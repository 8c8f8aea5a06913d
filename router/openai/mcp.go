package openai

import (
	"errors"
	"fmt"
	"net/http"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/router/jsonkind"
	"fusion/router/mcpchat"
)

// MCP tools in chat completions: a tools entry
// {"type": "mcp", "server_label": "fs", "allowed_tools": ["read_text_file"]}
// (OpenAI Responses' shape) asks the server to offer that configured MCP
// server's tools to the model and to run the model's calls of them
// itself; see router/mcpchat. server_url, headers and require_approval
// are accepted and ignored: only servers of the node's configuration are
// reached, by label, and calls are never held for approval.

// parseMCPTool checks one MCP tools entry.
func parseMCPTool(t *chattemplate.Object, param string) (mcpchat.Ref, *Error) {
	ref, fe := mcpchat.ParseRef(t, param, "server_label", []string{"allowed_tools"}, func(p string, i int) string { return fmt.Sprintf("%s[%d]", p, i) })
	if fe == nil {
		return ref, nil
	}
	if fe.Want == "" {
		return ref, missingParam(fe.Param)
	}
	return ref, invalidType(fe.Param, fe.Want, fe.Got)
}

// resolveMCP finds the MCP tools refs ask for; their names may not clash
// with the request's own functions.
func resolveMCP(mc *mcpchat.Runner, refs []mcpchat.Ref, tools []*chattemplate.Object) (*mcpchat.Toolset, *Error) {
	if len(refs) == 0 {
		return nil, nil
	}
	ts, err := mc.Resolve(refs)
	if err != nil {
		return nil, mcpRefError(err)
	}
	if name := ts.Clash(tools); name != "" {
		return nil, invalidRequest("tools", "Invalid 'tools': the function '%s' has the name of an MCP tool the request asks for; rename it or leave that tool out with 'allowed_tools'.", name)
	}
	return ts, nil
}

// mcpRefError maps an unmet MCP ask: a 400 naming the field, or a 503
// while the server is not ready.
func mcpRefError(err error) *Error {
	var re *mcpchat.RefError
	if !errors.As(err, &re) {
		return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: err.Error()}
	}
	if re.NotReady {
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Param: re.Param, Code: "mcp_server_not_ready",
			Message: "Invalid '" + re.Param + "': " + re.Msg, RetryAfter: 1}
	}
	return invalidRequest(re.Param, "Invalid '%s': %s", re.Param, re.Msg)
}

// MCPCall is an MCP tool call the server ran for the model, in OpenAI
// Responses' mcp_call shape: in a streamed answer a delta's mcp_call
// shows it twice, when it starts (status in_progress) and with its
// output (completed) or error (failed); a whole answer's message lists
// them under mcp_calls.
type MCPCall struct {
	ID          string  `json:"id"`
	Type        string  `json:"type"` // "mcp_call"
	ServerLabel string  `json:"server_label"`
	Name        string  `json:"name"`
	Arguments   string  `json:"arguments"`
	Status      string  `json:"status"` // in_progress, completed, failed
	Output      *string `json:"output"`
	Error       *string `json:"error"`
}

// mcpCall is the wire form of a server-run call or its result.
func mcpCall(st *engine.ServerToolStep) MCPCall {
	c := MCPCall{ID: st.ID, Type: "mcp_call", ServerLabel: st.Server, Name: st.Name, Arguments: st.Arguments, Status: "in_progress"}
	if st.Done {
		out := st.Output
		if st.IsError {
			c.Status, c.Error = "failed", &out
		} else {
			c.Status, c.Output = "completed", &out
		}
	}
	return c
}

// mcpToolChoice reads OpenAI Responses' MCP tool choice, {"type": "mcp",
// "server_label": "fs", "name": "read_text_file"}: with a name, the model
// must call that tool of that server (the tool's name on the server or as
// listed); without one, it must call a tool, which is only expressible
// when every tool of the request is that server's.
func mcpToolChoice(c *chattemplate.Object, tools []*chattemplate.Object, ts *mcpchat.Toolset) (engine.ToolChoice, *Error) {
	var choice engine.ToolChoice
	lv, _ := c.Get("server_label")
	label, ok := lv.(string)
	if !ok || label == "" {
		return choice, missingParam("tool_choice.server_label")
	}
	if ts == nil || !ts.HasServer(label) {
		return choice, invalidRequest("tool_choice.server_label", "Invalid value for 'tool_choice.server_label': '%s' is not among the request's MCP tools.", label)
	}
	nv, _ := c.Get("name")
	if nv == nil {
		if !ts.OnlyServer(label) || len(tools) != len(ts.Definitions()) { // other servers' or the client's tools
			return choice, missingParam("tool_choice.name")
		}
		choice.Mode = engine.ToolRequired
		return choice, nil
	}
	name, ok := nv.(string)
	if !ok {
		return choice, invalidType("tool_choice.name", "a string", jsonkind.OfValue(nv))
	}
	listed, ok := ts.Find(label, name)
	if !ok {
		return choice, invalidRequest("tool_choice.name", "Invalid value for 'tool_choice.name': the MCP server '%s' offers no tool '%s' to this request.", label, name)
	}
	choice.Mode, choice.Name = engine.ToolNamed, listed
	return choice, nil
}
