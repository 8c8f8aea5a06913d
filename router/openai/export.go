package openai

import (
	"encoding/json"
	"net/http"

	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/router/mcpchat"
)

// This file exports the checks of the chat API to dialects built on it
// (router/openclaw), so they validate and convert exactly as
// /v1/chat/completions does and answer the same errors.

// DecodeBody reads the request body as one JSON object into v, as the
// chat API does: unknown fields ignored, a value of the wrong type a 400
// naming the field, a body over the limit a 413.
func DecodeBody(r *http.Request, v any) *Error { return decodeBody(r, v) }

// ReadBody reads the whole request body (a 413 over the limit).
func ReadBody(r *http.Request) ([]byte, *Error) { return readBody(r) }

// DecodeJSON decodes body, one JSON object, into v, as DecodeBody does.
func DecodeJSON(body []byte, v any) *Error { return decodeJSON(body, v) }

// ParseMessages checks a chat messages array as the chat API does.
func ParseMessages(raw json.RawMessage) ([]*chattemplate.Object, *Error) { return parseMessages(raw) }

// ParseTools checks an array of tool definitions as the chat API does.
func ParseTools(raw json.RawMessage) ([]*chattemplate.Object, *Error) { return parseToolList(raw) }

// ChatEngineRequest checks a chat request and converts it into one engine
// request, as /v1/chat/completions does for one non-streamed choice (n,
// stream and stream_options are ignored), with the MCP tools it asks for
// that mc resolves (nil: none; with a nil mc an MCP tool is a 400).
func ChatEngineRequest(req *ChatRequest, opts Options, id string, mc *mcpchat.Runner) (*engine.Request, *mcpchat.Toolset, *Error) {
	r := *req
	r.N, r.Stream, r.StreamOptions = nil, nil, nil
	p, err := r.toPlan(opts, id, mc)
	if err != nil {
		return nil, nil, err
	}
	return p.reqs[0], p.mcp, nil
}

// CheckChatTools checks a chat request's tools (functions and MCP
// servers) as the chat API does, without resolving the servers.
func CheckChatTools(raw json.RawMessage) *Error {
	_, _, err := parseTools(raw)
	return err
}

// MCPCallOf is a server-run MCP call's step as the chat API shows it.
func MCPCallOf(st *engine.ServerToolStep) MCPCall { return mcpCall(st) }

// InvalidRequest is a 400 invalid_value naming param.
func InvalidRequest(param, format string, a ...any) *Error {
	return invalidRequest(param, format, a...)
}

// InvalidType is a 400 invalid_type: param should be want but is got.
func InvalidType(param, want, got string) *Error { return invalidType(param, want, got) }

// MissingParam is a 400 missing_required_parameter.
func MissingParam(param string) *Error { return missingParam(param) }

// EngineError maps an engine error, naming the model on a 404.
func EngineError(err error, model string) *Error { return engineError(err, model) }

// WriteJSON answers v with status, encoded as every OpenAI route does.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }
