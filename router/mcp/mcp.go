// Package mcp serves the node's MCP host over HTTP: GET /v1/mcp/servers,
// GET /v1/mcp/tools and POST /v1/mcp/execute, with errors in OpenAI's
// shape like the other /v1 routes. The host itself (processes, sessions,
// schemas) is package mcp/host.
package mcp

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"fusion/mcp/host"
	"fusion/router/jsonkind"
	"fusion/router/openai"
)

// Host is what the routes need of the MCP host: *host.Host on a lone
// node, mcpremote.Cluster in a cluster.
type Host = host.Provider

// Handler serves the /v1/mcp routes.
type Handler struct{ host Host }

// New makes the handler; a nil host has no servers and no tools.
func New(h Host) *Handler { return &Handler{host: h} }

// Mount adds the routes to r (behind the caller's auth).
func (h *Handler) Mount(r chi.Router) {
	r.Get("/v1/mcp/servers", h.servers)
	r.Get("/v1/mcp/tools", h.tools)
	r.Post("/v1/mcp/execute", h.execute)
}

func (h *Handler) servers(w http.ResponseWriter, _ *http.Request) {
	out := []host.ServerStatus{}
	if h.host != nil {
		out = append(out, h.host.Servers()...)
	}
	openai.WriteJSON(w, http.StatusOK, map[string]any{"servers": out})
}

// ToolInfo is one tool of GET /v1/mcp/tools: the contract's name and
// description, plus its input schema, its server and its name there.
type ToolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Title       string `json:"title,omitempty"`
	Server      string `json:"server"`
	ServerTool  string `json:"server_tool"`
	InputSchema any    `json:"input_schema"`
}

func (h *Handler) tools(w http.ResponseWriter, _ *http.Request) {
	out := []ToolInfo{}
	if h.host != nil {
		for _, t := range h.host.Tools() {
			out = append(out, ToolInfo{Name: t.Name, Description: t.Description, Title: t.Title,
				Server: t.Server, ServerTool: t.ServerTool, InputSchema: t.InputSchema})
		}
	}
	openai.WriteJSON(w, http.StatusOK, map[string]any{"tools": out})
}

type executeRequest struct {
	ToolName  *string         `json:"tool_name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ExecuteResponse is the answer of POST /v1/mcp/execute: the contract's
// tool_name, content and is_error, plus the server and any structured
// content.
type ExecuteResponse struct {
	ToolName          string    `json:"tool_name"`
	Server            string    `json:"server"`
	Content           []Content `json:"content"`
	StructuredContent any       `json:"structured_content,omitempty"`
	IsError           bool      `json:"is_error"`
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if e := openai.DecodeBody(r, &req); e != nil {
		openai.WriteError(w, e)
		return
	}
	if req.ToolName == nil || *req.ToolName == "" {
		openai.WriteError(w, openai.MissingParam("tool_name"))
		return
	}
	args := map[string]any{}
	if len(req.Arguments) > 0 && string(req.Arguments) != "null" {
		if k := jsonkind.Of(req.Arguments); k != "an object" {
			openai.WriteError(w, openai.InvalidType("arguments", "an object", k))
			return
		}
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			openai.WriteError(w, openai.InvalidRequest("arguments", "Invalid 'arguments': %v.", err))
			return
		}
	}
	if h.host == nil {
		openai.WriteError(w, toolNotFound(*req.ToolName))
		return
	}
	res, tool, err := h.host.Call(r.Context(), *req.ToolName, args)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		openai.WriteError(w, callError(*req.ToolName, err))
		return
	}
	out := ExecuteResponse{ToolName: *req.ToolName, Server: tool.Server, Content: MapContent(res.Content),
		StructuredContent: res.StructuredContent, IsError: res.IsError}
	openai.WriteJSON(w, http.StatusOK, out)
}

func toolNotFound(name string) *openai.Error {
	return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "tool_name", Code: "tool_not_found",
		Message: fmt.Sprintf("The MCP tool '%s' does not exist or its server is not connected (GET /v1/mcp/tools lists them).", name)}
}

// callError maps the host's errors: bad arguments 400 naming the field,
// an unknown tool 404, a server not ready 503, a transport failure 502,
// the call timeout 504.
func callError(name string, err error) *openai.Error {
	var ae *host.ArgumentError
	var ce *host.CallError
	switch {
	case errors.As(err, &ae):
		return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: ae.Path, Code: "invalid_arguments",
			Message: fmt.Sprintf("Invalid '%s' for the MCP tool '%s': %s.", ae.Path, name, ae.Msg)}
	case errors.Is(err, host.ErrToolNotFound):
		return toolNotFound(name)
	case errors.Is(err, host.ErrNotReady):
		return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "mcp_server_not_ready",
			Message: err.Error(), RetryAfter: 1}
	case errors.As(err, &ce) && ce.Timeout:
		return &openai.Error{Status: http.StatusGatewayTimeout, Type: openai.TypeServer, Code: "mcp_timeout", Message: err.Error()}
	case errors.As(err, &ce):
		return &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "mcp_server_error", Message: err.Error()}
	}
	return &openai.Error{Status: http.StatusBadGateway, Type: openai.TypeServer, Code: "mcp_server_error", Message: err.Error()}
}

// Content is one item of a tool's result. Each MCP content type keeps its
// MCP "type" (text, image, audio, resource_link, resource); fields are
// snake_case like the rest of the API, binary data is base64.
type Content struct {
	Type        string           `json:"type"`
	Text        *string          `json:"text,omitempty"`      // text
	Data        string           `json:"data,omitempty"`      // image, audio: base64
	MimeType    string           `json:"mime_type,omitempty"` // image, audio, resource_link
	URI         string           `json:"uri,omitempty"`       // resource_link
	Name        string           `json:"name,omitempty"`      // resource_link
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	Size        *int64           `json:"size,omitempty"`
	Resource    *Resource        `json:"resource,omitempty"` // resource (embedded)
	Annotations *sdk.Annotations `json:"annotations,omitempty"`
	Meta        map[string]any   `json:"_meta,omitempty"`
	Unknown     json.RawMessage  `json:"raw,omitempty"` // a content type this version does not know, as sent
}

// Resource is an embedded resource: text, or a base64 blob.
type Resource struct {
	URI      string  `json:"uri"`
	MimeType string  `json:"mime_type,omitempty"`
	Text     *string `json:"text,omitempty"`
	Blob     string  `json:"blob,omitempty"`
}

// MapContent maps MCP content items to the API's.
func MapContent(items []sdk.Content) []Content {
	out := make([]Content, 0, len(items))
	for _, item := range items {
		out = append(out, mapOne(item))
	}
	return out
}

func mapOne(item sdk.Content) Content {
	b64 := base64.StdEncoding.EncodeToString
	switch c := item.(type) {
	case *sdk.TextContent:
		return Content{Type: "text", Text: &c.Text, Annotations: c.Annotations, Meta: c.Meta}
	case *sdk.ImageContent:
		return Content{Type: "image", Data: b64(c.Data), MimeType: c.MIMEType, Annotations: c.Annotations, Meta: c.Meta}
	case *sdk.AudioContent:
		return Content{Type: "audio", Data: b64(c.Data), MimeType: c.MIMEType, Annotations: c.Annotations, Meta: c.Meta}
	case *sdk.ResourceLink:
		return Content{Type: "resource_link", URI: c.URI, Name: c.Name, Title: c.Title, Description: c.Description,
			MimeType: c.MIMEType, Size: c.Size, Annotations: c.Annotations, Meta: c.Meta}
	case *sdk.EmbeddedResource:
		out := Content{Type: "resource", Annotations: c.Annotations, Meta: c.Meta}
		if rc := c.Resource; rc != nil {
			res := &Resource{URI: rc.URI, MimeType: rc.MIMEType}
			if rc.Blob != nil {
				res.Blob = b64(rc.Blob)
			} else {
				text := rc.Text
				res.Text = &text
			}
			out.Resource = res
		}
		return out
	}
	raw, _ := item.MarshalJSON()
	var head struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &head)
	return Content{Type: head.Type, Unknown: raw}
}
