package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/router/jsonkind"
	"fusion/router/mcpchat"
)

// MCP tools in Messages: the server offers a configured MCP server's
// tools to the model and runs the model's calls of them itself (see
// router/mcpchat), showing each as an mcp_tool_use block and its result
// as an mcp_tool_result block, as Anthropic's MCP connector does. Two
// ways to ask:
//
//   - the MCP connector's mcp_servers: [{"type": "url", "url": ...,
//     "name": "fs", "tool_configuration": {"enabled": true,
//     "allowed_tools": [...]}}] — name is a server of the node's
//     configuration; url and authorization_token are ignored (no server
//     a request names by URL is ever reached);
//   - a tools entry in OpenAI Responses' shape, as the chat API takes it:
//     {"type": "mcp", "server_label": "fs", "allowed_tools": [...]}.
//
// A turn that ran out of steps ends with stop_reason pause_turn.

// mcpRef reads one ask in an object of the request.
func mcpRef(t *chattemplate.Object, param, labelKey string, allowedPath ...string) (mcpchat.Ref, *Error) {
	ref, fe := mcpchat.ParseRef(t, param, labelKey, allowedPath, at)
	if fe == nil {
		return ref, nil
	}
	if fe.Want == "" {
		return ref, missing(fe.Param)
	}
	return ref, invalidType(fe.Param, fe.Want, fe.Got)
}

// parseMCPServers reads mcp_servers.
func parseMCPServers(raw json.RawMessage) ([]mcpchat.Ref, *Error) {
	if isNull(raw) {
		return nil, nil
	}
	v, err := decodeRaw(raw, "mcp_servers", "a valid list")
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, invalidType("mcp_servers", "a valid list", jsonkind.OfValue(v))
	}
	var refs []mcpchat.Ref
	for i, item := range list {
		param := at("mcp_servers", i)
		s, ok := item.(*chattemplate.Object)
		if !ok {
			return nil, invalidType(param, "a valid dictionary", jsonkind.OfValue(item))
		}
		if typ, err := stringField(s, "type", param); err != nil {
			return nil, err
		} else if typ != "url" {
			return nil, invalid("%s.type: Input should be 'url'", param)
		}
		if cv, ok := field(s, "tool_configuration"); ok {
			cfg, ok := cv.(*chattemplate.Object)
			if !ok {
				return nil, invalidType(param+".tool_configuration", "a valid dictionary", jsonkind.OfValue(cv))
			}
			if ev, ok := field(cfg, "enabled"); ok {
				if enabled, ok := ev.(bool); !ok {
					return nil, invalidType(param+".tool_configuration.enabled", "a valid boolean", jsonkind.OfValue(ev))
				} else if !enabled {
					continue
				}
			}
		}
		ref, err := mcpRef(s, param, "name", "tool_configuration", "allowed_tools")
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// resolveMCP resolves the asks and adds their tools to the request's, whose
// names they may not take.
func resolveMCP(mc *mcpchat.Runner, refs []mcpchat.Ref, tools []*chattemplate.Object) ([]*chattemplate.Object, *mcpchat.Toolset, *Error) {
	if len(refs) == 0 {
		return tools, nil, nil
	}
	ts, err := mc.Resolve(refs)
	if err != nil {
		var re *mcpchat.RefError
		if !errors.As(err, &re) {
			return nil, nil, &Error{Status: http.StatusInternalServerError, Type: TypeAPI, Message: err.Error()}
		}
		if re.NotReady {
			return nil, nil, &Error{Status: StatusOverloaded, Type: TypeOverloaded, Message: re.Param + ": " + re.Msg, RetryAfter: 5}
		}
		return nil, nil, invalid("%s: %s", re.Param, re.Msg)
	}
	if name := ts.Clash(tools); name != "" {
		return nil, nil, invalid("tools: the tool '%s' has the name of an MCP tool the request asks for; rename it or leave that tool out with allowed_tools.", name)
	}
	return append(tools, ts.Definitions()...), ts, nil
}

// mcpBlock is the block of a server-run call's step: mcp_tool_use when
// it starts, mcp_tool_result with its output.
func mcpBlock(st *engine.ServerToolStep) any {
	id := "mcptoolu_" + strings.TrimPrefix(st.ID, "call_")
	if st.Done {
		return MCPToolResultBlock{Type: "mcp_tool_result", ToolUseID: id, IsError: st.IsError,
			Content: []TextBlock{{Type: "text", Text: st.Output}}}
	}
	input := json.RawMessage(st.Arguments)
	if !json.Valid(input) {
		input = json.RawMessage("{}")
	}
	return MCPToolUseBlock{Type: "mcp_tool_use", ID: id, Name: st.Name, ServerName: st.Server, Input: input}
}

// mcpResultText is the text of an mcp_tool_result block of the history:
// a string, or text blocks joined.
func mcpResultText(b *chattemplate.Object, param string) (string, *Error) {
	cv, ok := field(b, "content")
	if !ok {
		return "", nil
	}
	switch c := cv.(type) {
	case string:
		return c, nil
	case []any:
		var texts []string
		for j, item := range c {
			tb, ok := item.(*chattemplate.Object)
			if !ok {
				return "", invalidType(at(param+".content", j), "a valid dictionary", jsonkind.OfValue(item))
			}
			s, err := stringField(tb, "text", at(param+".content", j))
			if err != nil {
				return "", err
			}
			texts = append(texts, s)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", invalidType(param+".content", "a valid string or a list of text blocks", fmt.Sprint(jsonkind.OfValue(cv)))
}
