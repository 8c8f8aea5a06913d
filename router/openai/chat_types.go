package openai

import "encoding/json"

// ChatRequest is the body of POST /v1/chat/completions. Fields whose JSON
// can take several shapes (messages, stop, tools, ...) stay raw here and are
// checked by the converter, so errors can name them precisely.
type ChatRequest struct {
	Model    string          `json:"model"`
	Messages json.RawMessage `json:"messages"`
	commonRequest

	MaxCompletionTokens *int  `json:"max_completion_tokens"`
	Logprobs            *bool `json:"logprobs"`
	TopLogprobs         *int  `json:"top_logprobs"`

	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	ResponseFormat     json.RawMessage `json:"response_format"`
	EnableThinking     *bool           `json:"enable_thinking"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
	ReasoningEffort    *string         `json:"reasoning_effort"`
}

// commonRequest holds the fields the chat and the legacy completions
// requests share.
type commonRequest struct {
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	Seed              *int64             `json:"seed"`

	Stop          json.RawMessage `json:"stop"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	User          *string         `json:"user"`
	Stream        *bool           `json:"stream"`
	StreamOptions *StreamOptions  `json:"stream_options"`

	TaskTag         *string `json:"task_tag"`
	BackendOverride *string `json:"backend_override"`
}

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// ChatCompletion is the answer of a non-streamed chat completion.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	Usage             Usage        `json:"usage"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatMessage   `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

// ChatMessage is the assistant's message. Content is null when the model
// only called tools; ToolCalls is null when it called none (the contract
// shows the member). The reasoning (the model's <think> block) is sent
// twice, as reasoning_content (vLLM, DeepSeek) and reasoning (OpenRouter,
// newer vLLM), and omitted when there is none.
type ChatMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	Reasoning        *string    `json:"reasoning,omitempty"`
	Refusal          *string    `json:"refusal"`
	ToolCalls        []ToolCall `json:"tool_calls"`
	// MCPCalls are the MCP tool calls the server ran for the model (an
	// extension: only with MCP tools in the request).
	MCPCalls []MCPCall `json:"mcp_calls,omitempty"`
}

// ToolCall is one call of ChatMessage.ToolCalls.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function of a ToolCall; Arguments is JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallDelta is one fragment of a streamed tool call, keyed by Index:
// the first carries ID, Type and the name (arguments ""), later ones only
// argument text, which clients concatenate per index.
type ToolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function FunctionCallDelta `json:"function"`
}

// FunctionCallDelta is the function of a ToolCallDelta.
type FunctionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatLogprobs is choices[].logprobs of the chat API.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// TokenLogprob is one token of ChatLogprobs.Content.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative of TokenLogprob.TopLogprobs.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Usage counts the tokens of a request. CachedTokens repeats
// PromptTokensDetails.CachedTokens at the top level, as the contract has it.
type Usage struct {
	PromptTokens            int                     `json:"prompt_tokens"`
	CompletionTokens        int                     `json:"completion_tokens"`
	TotalTokens             int                     `json:"total_tokens"`
	PromptTokensDetails     PromptTokensDetails     `json:"prompt_tokens_details"`
	CompletionTokensDetails CompletionTokensDetails `json:"completion_tokens_details"`
	CachedTokens            int                     `json:"cached_tokens"`
	// Speculative counts speculative decoding's tokens (backend_override
	// "rapid"); absent when the request did not draft.
	Speculative *SpeculativeUsage `json:"speculative,omitempty"`
}

// SpeculativeUsage is usage.speculative: the tokens drafted and the
// tokens of them the model accepted.
type SpeculativeUsage struct {
	Drafted  int `json:"drafted"`
	Accepted int `json:"accepted"`
}

// PromptTokensDetails is usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails is usage.completion_tokens_details.
// ReasoningTokens stays 0: the engine does not count the tokens of the
// reasoning apart from the answer's yet.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// ChatChunk is one server-sent event of a streamed chat completion.
type ChatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"` // "chat.completion.chunk"
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []ChatChunkChoice `json:"choices"`
	Usage             OptionalUsage     `json:"usage,omitzero"`
}

// ChatChunkChoice is one choice of a ChatChunk.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatDelta is the new part of the assistant's message.
type ChatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	Reasoning        *string         `json:"reasoning,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
	// MCPCall is an MCP tool call the server runs for the model, or its
	// result (an extension: only with MCP tools in the request).
	MCPCall *MCPCall `json:"mcp_call,omitempty"`
}

// OptionalUsage is the usage member of a chunk: absent (the zero value),
// null (Set without Usage), or an object.
type OptionalUsage struct {
	Set   bool
	Usage *Usage
}

// IsZero makes omitzero drop an unset OptionalUsage.
func (o OptionalUsage) IsZero() bool { return !o.Set }

// MarshalJSON writes null or the usage.
func (o OptionalUsage) MarshalJSON() ([]byte, error) {
	if o.Usage == nil {
		return []byte("null"), nil
	}
	return json.Marshal(o.Usage)
}
