package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"fusion/mcp/host"
	"fusion/router/openai"
)

// MCP is what GET and PUT /admin/api/mcp/servers need: the MCP server
// configuration every node runs, and the servers' state on every node.
type MCP interface {
	// MCPConfig is the configuration in force, as written: the one stored
	// through PutMCPConfig (source "cluster" in a cluster, "node" on a
	// lone node) once there is one, else this node's --mcp-config file
	// (source "file").
	MCPConfig() (cfg host.Config, source string)
	// PutMCPConfig stores doc (Claude Desktop's format, checked, as
	// written) for every node; it returns once the write is committed.
	// Each node then starts, stops and restarts its servers to match.
	PutMCPConfig(ctx context.Context, doc []byte) error
	// Servers is the state of every node's servers (each with its node).
	Servers() []host.ServerStatus
}

// DefaultMaxMCPConfigBytes bounds the body of PUT /admin/api/mcp/servers
// (the FSM's own bound, fsm.MaxMCPConfigBytes).
const DefaultMaxMCPConfigBytes = 256 << 10

// MCPDocument is the answer of GET (and PUT) /admin/api/mcp/servers: the
// configuration in Claude Desktop's format with every env and header
// value masked (host.SecretMask), where it comes from, and each server's
// state on every node that has it, by server name.
type MCPDocument struct {
	MCPServers map[string]json.RawMessage     `json:"mcpServers"`
	Source     string                         `json:"source"`
	Status     map[string][]host.ServerStatus `json:"status"`
}

func (h *Handler) mountMCP(r chi.Router) {
	if h.cfg.MCP == nil {
		return
	}
	r.Get("/admin/api/mcp/servers", h.mcpGet)
	r.Put("/admin/api/mcp/servers", h.mcpPut)
}

func (h *Handler) mcpDocument() (MCPDocument, error) {
	cfg, source := h.cfg.MCP.MCPConfig()
	raw, err := cfg.Document(true)
	if err != nil {
		return MCPDocument{}, err
	}
	var doc MCPDocument
	if err := json.Unmarshal(raw, &doc); err != nil {
		return MCPDocument{}, err
	}
	doc.Source = source
	doc.Status = map[string][]host.ServerStatus{}
	for _, s := range h.cfg.MCP.Servers() {
		doc.Status[s.Name] = append(doc.Status[s.Name], s)
	}
	return doc, nil
}

func (h *Handler) mcpGet(w http.ResponseWriter, _ *http.Request) {
	doc, err := h.mcpDocument()
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	openai.WriteJSON(w, http.StatusOK, doc)
}

// mcpPut replaces the configuration: checked here (a 400 naming the
// server and field), masks replaced by the stored secrets, then written
// for every node.
func (h *Handler) mcpPut(w http.ResponseWriter, r *http.Request) {
	limit := h.cfg.MaxMCPConfigBytes
	if limit <= 0 {
		limit = DefaultMaxMCPConfigBytes
	}
	r.Body = http.MaxBytesReader(w, r.Body, int64(limit))
	body, e := readBody(r)
	if e != nil {
		openai.WriteError(w, e)
		return
	}
	if body == nil {
		openai.WriteError(w, openai.MissingParam("mcpServers"))
		return
	}
	cfg, err := host.ParseRaw(body)
	if err == nil {
		current, _ := h.cfg.MCP.MCPConfig()
		err = cfg.KeepSecrets(current)
	}
	var ce *host.ConfigError
	if errors.As(err, &ce) {
		openai.WriteError(w, openai.InvalidRequest(ce.Field, "Invalid MCP configuration: %s.", ce.Msg))
		return
	}
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	doc, err := cfg.Document(false)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if len(doc) > limit {
		openai.WriteError(w, &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("The MCP configuration is %d bytes with its stored secrets; at most %d.", len(doc), limit)})
		return
	}
	if err := h.cfg.MCP.PutMCPConfig(r.Context(), doc); err != nil {
		openai.WriteError(w, &openai.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "mcp_config_not_written",
			Message: "The MCP configuration was not written: " + err.Error(), RetryAfter: 1})
		return
	}
	if h.cfg.Logger != nil { // names only: the entries hold secrets
		h.cfg.Logger.Info("mcp configuration replaced", "servers", len(cfg.Servers))
	}
	out, err := h.mcpDocument()
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	openai.WriteJSON(w, http.StatusOK, out)
}
