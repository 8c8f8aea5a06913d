package openclaw

import (
	"encoding/json"
	"time"

	"fusion/router/openai"
)

// The bodies of the protocol's requests and answers. The contract fixes
// the create and turn shapes; the others are ours (DESIGN.md).

// createRequest is the body of POST /v1/openclaw/agent/sessions.
type createRequest struct {
	Model        *string         `json:"model"`
	SystemPrompt *string         `json:"system_prompt"`
	Tools        json.RawMessage `json:"tools"`
}

// SessionInfo describes a session: the answer of create, get, steer and
// tool-results (with Messages only from get), and the session_state event.
type SessionInfo struct {
	SessionID      string            `json:"session_id"`
	TurnCount      int               `json:"turn_count"`
	Active         bool              `json:"active"`
	Model          string            `json:"model"`
	ToolsCount     int               `json:"tools_count"`
	SystemPrompt   string            `json:"system_prompt"`
	MessageCount   int               `json:"message_count"`
	CreatedAt      int64             `json:"created_at"`       // unix seconds
	LastAccessedAt int64             `json:"last_accessed_at"` // unix seconds
	ExpiresAt      int64             `json:"expires_at"`       // unix seconds
	Messages       []json.RawMessage `json:"messages,omitempty"`
}

func infoOf(s *Session, withMessages bool) SessionInfo {
	in := SessionInfo{
		SessionID: s.ID, TurnCount: s.TurnCount, Active: s.Active, Model: s.Model, ToolsCount: toolsCount(s.Tools),
		SystemPrompt: s.SystemPrompt, MessageCount: len(s.History),
		CreatedAt: s.CreatedAt.Unix(), LastAccessedAt: s.LastAccess.Unix(), ExpiresAt: s.ExpiresAt.Unix(),
	}
	if withMessages {
		in.Messages = s.History
		if in.Messages == nil {
			in.Messages = []json.RawMessage{}
		}
	}
	return in
}

func toolsCount(tools json.RawMessage) int {
	var list []json.RawMessage
	_ = json.Unmarshal(tools, &list)
	return len(list)
}

// SessionList is the answer of GET /v1/openclaw/agent/sessions.
type SessionList struct {
	Object   string        `json:"object"` // "list"
	Sessions []SessionInfo `json:"sessions"`
	Count    int           `json:"count"`
}

// Deleted is the answer of DELETE /v1/openclaw/agent/sessions/{id}.
type Deleted struct {
	SessionID string `json:"session_id"`
	Deleted   bool   `json:"deleted"`
}

// turnRequest is the body of a turn: the chat API's request (messages,
// max_tokens, temperature, tool_choice, response_format, ...), whose model
// and tools come from the session.
type turnRequest = openai.ChatRequest

// TurnResult is the answer of a turn, and the data of turn_end.
type TurnResult struct {
	Content          string            `json:"content"`
	ReasoningContent *string           `json:"reasoning_content,omitempty"`
	ToolCalls        []openai.ToolCall `json:"tool_calls"`
	// MCPCalls are the MCP tool calls the server ran during the turn
	// (the session's tools named MCP servers), with their results.
	MCPCalls     []openai.MCPCall `json:"mcp_calls,omitempty"`
	FinishReason string           `json:"finish_reason"`
	Usage        TurnUsage        `json:"usage"`
	SessionID    string           `json:"session_id"`
	Turn         int              `json:"turn"`
}

// TurnUsage counts the tokens of a turn.
type TurnUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// toolResultRequest is the body of POST /v1/openclaw/agent/tool-results.
type toolResultRequest struct {
	SessionID  *string         `json:"session_id"`
	ToolCallID *string         `json:"tool_call_id"`
	Result     json.RawMessage `json:"result"`
}

// steerRequest is the body of POST /v1/openclaw/agent/steer.
type steerRequest struct {
	SessionID *string         `json:"session_id"`
	Message   json.RawMessage `json:"message"`
	Mode      *string         `json:"mode"`
}

// The data of the stream's events.

type connectedEvent struct {
	SessionID string `json:"session_id"`
	Timestamp int64  `json:"timestamp"`
}

type turnStartEvent struct {
	SessionID string `json:"session_id"`
	Turn      int    `json:"turn"`
}

type toolCallEvent struct {
	SessionID string          `json:"session_id"`
	Turn      int             `json:"turn"`
	ToolCall  openai.ToolCall `json:"tool_call"`
	// MCPCall is set for a call the server runs on an MCP server.
	MCPCall *openai.MCPCall `json:"mcp_call,omitempty"`
}

type turnFailedEvent struct {
	SessionID string `json:"session_id"`
	Turn      int    `json:"turn"`
	Error     string `json:"error"`
}

type toolResultEvent struct {
	SessionID  string `json:"session_id"`
	ToolCallID string `json:"tool_call_id"`
	Result     string `json:"result"`
	// For a server-run MCP call: the turn, whether the tool failed, and
	// the call with its output.
	Turn    int             `json:"turn,omitempty"`
	IsError *bool           `json:"is_error,omitempty"`
	MCPCall *openai.MCPCall `json:"mcp_call,omitempty"`
}

type heartbeatEvent struct {
	Timestamp int64 `json:"timestamp"`
}

type sessionClosedEvent struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason"` // deleted, expired, evicted
}

func unix(t time.Time) int64 { return t.Unix() }
