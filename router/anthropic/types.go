package anthropic

import "encoding/json"

// MessagesRequest is the body of POST /v1/messages (and, without the
// generation fields, of count_tokens). Fields that take several shapes stay
// raw and are checked by the converter, so errors can name them.
type MessagesRequest struct {
	Model         string          `json:"model"`
	Messages      json.RawMessage `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int            `json:"max_tokens"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Stream        *bool           `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Metadata      json.RawMessage `json:"metadata"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Thinking      json.RawMessage `json:"thinking"`
	OutputConfig  json.RawMessage `json:"output_config"`
	// OutputFormat is the structured-outputs beta's spelling of
	// output_config.format, which the Messages API still takes.
	OutputFormat json.RawMessage `json:"output_format"`
	// ContextManagement (Claude Code sends clear_thinking edits) has no
	// meaning here: no thinking or tool results are kept between
	// requests to clear. Accepted when an object, and ignored.
	ContextManagement json.RawMessage `json:"context_management"`
	// TaskTag is the contract's scheduling hint, as in the OpenAI dialect.
	TaskTag *string `json:"task_tag"`
	// BackendOverride is the contract's backend_override, as in the
	// OpenAI dialect: "mlx", "cpu", "rapid" or "cloud".
	BackendOverride *string `json:"backend_override"`
	// MCPServers names MCP servers whose tools the server runs for the
	// model (the MCP connector's shape; see mcp.go).
	MCPServers json.RawMessage `json:"mcp_servers"`
}

// Message is the answer of a non-streamed request (and, with empty
// content, the message of message_start).
type Message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"` // "message"
	Role         string  `json:"role"` // "assistant"
	Model        string  `json:"model"`
	Content      []any   `json:"content"` // TextBlock, ThinkingBlock, ToolUseBlock
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        Usage   `json:"usage"`
}

// TextBlock is a text block of Message.Content.
type TextBlock struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// ThinkingBlock is a thinking block. Signature authenticates it (and, when
// the request asked for display "omitted", carries the thinking, which the
// block then shows empty); clients send it back as they got it.
type ThinkingBlock struct {
	Type      string `json:"type"` // "thinking"
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

// ToolUseBlock is a tool call.
type ToolUseBlock struct {
	Type  string          `json:"type"` // "tool_use"
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// MCPToolUseBlock is an MCP tool call the server ran for the model (the
// MCP connector's block).
type MCPToolUseBlock struct {
	Type       string          `json:"type"` // "mcp_tool_use"
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	ServerName string          `json:"server_name"`
	Input      json.RawMessage `json:"input"`
}

// MCPToolResultBlock is the result of an MCPToolUseBlock.
type MCPToolResultBlock struct {
	Type      string      `json:"type"` // "mcp_tool_result"
	ToolUseID string      `json:"tool_use_id"`
	IsError   bool        `json:"is_error"`
	Content   []TextBlock `json:"content"`
}

// Usage counts the tokens of a message.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	// Speculative counts speculative decoding's tokens when the model
	// drafted (its settings make "rapid" the default); absent otherwise.
	Speculative *SpeculativeUsage `json:"speculative,omitempty"`
}

// SpeculativeUsage is usage.speculative: the tokens drafted and the
// tokens of them the model accepted.
type SpeculativeUsage struct {
	Drafted  int `json:"drafted"`
	Accepted int `json:"accepted"`
}

// Stream events. Each has the Type its SSE event is named after.

// MessageStart is the first event of a stream.
type MessageStart struct {
	Type    string  `json:"type"` // "message_start"
	Message Message `json:"message"`
}

// ContentBlockStart opens block Index.
type ContentBlockStart struct {
	Type         string `json:"type"` // "content_block_start"
	Index        int    `json:"index"`
	ContentBlock any    `json:"content_block"`
}

// ContentBlockDelta adds to block Index.
type ContentBlockDelta struct {
	Type  string `json:"type"` // "content_block_delta"
	Index int    `json:"index"`
	Delta any    `json:"delta"` // TextDelta, ThinkingDelta, SignatureDelta, InputJSONDelta
}

// TextDelta is the delta of a text block.
type TextDelta struct {
	Type string `json:"type"` // "text_delta"
	Text string `json:"text"`
}

// ThinkingDelta is the delta of a thinking block.
type ThinkingDelta struct {
	Type     string `json:"type"` // "thinking_delta"
	Thinking string `json:"thinking"`
}

// SignatureDelta closes a thinking block.
type SignatureDelta struct {
	Type      string `json:"type"` // "signature_delta"
	Signature string `json:"signature"`
}

// InputJSONDelta is a fragment of a tool_use block's input JSON.
type InputJSONDelta struct {
	Type        string `json:"type"` // "input_json_delta"
	PartialJSON string `json:"partial_json"`
}

// ContentBlockStop closes block Index.
type ContentBlockStop struct {
	Type  string `json:"type"` // "content_block_stop"
	Index int    `json:"index"`
}

// Ping keeps the stream alive.
type Ping struct {
	Type string `json:"type"` // "ping"
}

// MessageDelta carries the stop reason and the cumulative usage.
type MessageDelta struct {
	Type  string           `json:"type"` // "message_delta"
	Delta MessageDeltaBody `json:"delta"`
	Usage Usage            `json:"usage"`
}

// MessageDeltaBody is MessageDelta.Delta.
type MessageDeltaBody struct {
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// MessageStop ends a stream.
type MessageStop struct {
	Type string `json:"type"` // "message_stop"
}

// CountTokensResult is the answer of count_tokens.
type CountTokensResult struct {
	InputTokens int `json:"input_tokens"`
}
