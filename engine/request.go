package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"fusion/engine/chattemplate"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// Priority is the scheduling class of a request (from task_tag).
type Priority int

// Priority classes, most urgent first.
const (
	PriorityRealtime   Priority = iota // claude_code
	PriorityBatch                      // openclaw, and the default
	PriorityBackground                 // background
)

// PriorityOf maps the contract's task_tag to a scheduling class: "" and
// "openclaw" are batch, "claude_code" realtime, "background" background;
// ok is false for any other tag.
func PriorityOf(taskTag string) (p Priority, ok bool) {
	switch taskTag {
	case "", "openclaw":
		return PriorityBatch, true
	case "claude_code":
		return PriorityRealtime, true
	case "background":
		return PriorityBackground, true
	}
	return 0, false
}

// BackendCloud is the Request.Backend of a request for an upstream
// provider (backend_override "cloud").
const BackendCloud = "cloud"

// Request is the one neutral request every API dialect converts into and
// every node forwards. Exactly one of Messages, Prompt and PromptTokens is
// set.
type Request struct {
	// ID identifies the request in logs and metrics.
	ID    string
	Model string

	// Messages (with optional Tools) are rendered through the model's chat
	// template; Prompt is raw text, tokenized as it is.
	Messages []*chattemplate.Object
	Tools    []*chattemplate.Object
	Prompt   *string
	// PromptTokens is a prompt given as token ids (the legacy completions
	// API takes them); the runner feeds them to the model as they are.
	PromptTokens       []int
	EnableThinking     *bool          // nil: left to the template
	ChatTemplateKwargs map[string]any // extra template variables
	// ContinueFinal continues the final (assistant) message instead of
	// opening a new turn: the answer's text is what follows it (Anthropic
	// prefill).
	ContinueFinal bool
	// ReasoningBudget, when positive, bounds the reasoning tokens: once
	// spent, the runner makes the model close its <think> block.
	ReasoningBudget int
	// Backend, when set ("mlx" or "cpu"), makes the request run only on an
	// engine whose backend for the model is that one (the chat request's
	// backend_override): the dispatcher picks such a node, and a runner
	// whose model loads on another backend refuses with ErrUnavailable.
	// BackendCloud sends it to a configured upstream provider instead
	// (the node's frontend does; no engine runs it).
	Backend string
	// Speculative turns speculative decoding on for the request
	// (backend_override "rapid"): a draft model, or prompt lookup when the
	// model has none, proposes tokens the model verifies several at a time.
	// The output is distributed as without it (greedy: identical). A
	// model's settings may make it the default.
	Speculative bool
	// StartThinking opens the reasoning block in the generation prompt
	// where a hybrid template leaves that to the model (see
	// prompt.Request.StartThinking).
	StartThinking bool

	// Sampling holds the sampler's parameters, including Logprobs and
	// TopLogprobs; the runner adds the model's end-of-generation ids to
	// StopTokenIDs.
	Sampling  sample.Params
	MaxTokens int      // 0: until a stop condition, the node's cap (if any) or the context is full
	Stop      []string // stop sequences; the matched text is not returned

	// ResponseFormat, when set, constrains the answer to JSON.
	ResponseFormat *ResponseFormat
	// ToolChoice says whether the model may, must or must not call Tools.
	ToolChoice ToolChoice

	Priority Priority
}

// ResponseFormat constrains generation to a JSON value: any JSON object
// (Schema nil) or one that validates against Schema (a JSON Schema).
type ResponseFormat struct {
	Schema []byte
}

// ToolMode is how a request lets the model use its tools.
type ToolMode int

// Tool modes.
const (
	ToolAuto     ToolMode = iota // the model decides (the default)
	ToolNone                     // no tool calls: call-like text stays content
	ToolRequired                 // at least one call of a declared tool
	ToolNamed                    // a call of the tool ToolChoice.Name
)

// ToolChoice is the dialect-neutral tool_choice. With ToolRequired and
// ToolNamed the runner constrains the output to the model family's tool
// call format, each call's arguments to that tool's parameters schema.
type ToolChoice struct {
	Mode ToolMode
	Name string // ToolNamed: the function to call
	// NoParallel allows at most one call (OpenAI parallel_tool_calls:
	// false, Anthropic disable_parallel_tool_use).
	NoParallel bool
}

// Forced reports whether the model must call a tool.
func (c ToolChoice) Forced() bool { return c.Mode == ToolRequired || c.Mode == ToolNamed }

// PromptRequest returns the part of r that decides the prompt tokens.
func (r *Request) PromptRequest() prompt.Request {
	return prompt.Request{
		Prompt:             r.Prompt,
		Messages:           r.Messages,
		Tools:              r.Tools,
		EnableThinking:     r.EnableThinking,
		ChatTemplateKwargs: r.ChatTemplateKwargs,
		ContinueFinal:      r.ContinueFinal,
		StartThinking:      r.StartThinking,
	}
}

// FinishReason says why generation ended, in OpenAI's words.
type FinishReason string

// Finish reasons.
const (
	FinishStop   FinishReason = "stop"   // a stop token or stop sequence
	FinishLength FinishReason = "length" // MaxTokens (or a KV budget a lone sequence outgrew)
	// FinishContextWindow: the model's context window was full before
	// MaxTokens (or the node's cap) was reached. Anthropic calls it
	// model_context_window_exceeded; OpenAI dialects have no word for it
	// and say "length".
	FinishContextWindow FinishReason = "context_window"
	// FinishToolCalls: generation stopped normally after tool calls.
	FinishToolCalls FinishReason = "tool_calls"
	// FinishToolStepLimit: the server ran tools for the model (MCP tools,
	// router/mcpchat) for as many model turns as it allows and stopped
	// while the model was still calling them. OpenAI's Responses API
	// calls this max_tool_calls, Anthropic pause_turn.
	FinishToolStepLimit FinishReason = "max_tool_calls"
)

// ServerToolStep is a tool call the server runs itself, not the client
// (an MCP tool the request asked for, see router/mcpchat): an event
// carries it once when the call starts and once, Done, with its result.
type ServerToolStep struct {
	ID        string // the model's call id
	Server    string // the MCP server that runs it
	Name      string // the tool's name on that server
	Arguments string // a JSON object, as the model wrote it
	// Done marks the result: Output is what the model is shown of it
	// (its text), IsError a failed call or a tool's own error.
	Done    bool
	Output  string
	IsError bool
}

// ToolCall is one complete tool call the model made, found by the model
// family's output parser.
type ToolCall struct {
	Index     int    // 0, 1, ... in the order the model made them
	ID        string // "call_…"
	Name      string
	Arguments string // a JSON object, compact, key order kept
	// Undeclared is set when the request declared no tool of that name.
	Undeclared bool
}

// TokenLogprob is one token with its log-probability.
type TokenLogprob struct {
	ID      int
	Text    string
	Logprob float64
}

// Usage counts tokens of one request.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int // prompt tokens whose KV came from the cache
	CacheWriteTokens int // prompt tokens whose KV this request newly stored in the cache
	// DraftedTokens are the tokens speculative decoding proposed and
	// AcceptedTokens those of them the model kept (both 0 without it).
	DraftedTokens, AcceptedTokens int
}

// Event is one step of a generation, in order: zero or more deltas, then
// exactly one final event with Done set (FinishReason and Usage filled) or
// Err set.
type Event struct {
	// Text is newly decoded answer text (whole UTF-8 characters; stop
	// sequences and partial tags are held back until ruled out).
	Text string
	// Reasoning is newly decoded reasoning (the model's <think> block).
	Reasoning string
	// ToolCalls completed in this step, each whole.
	ToolCalls []ToolCall
	// Tokens are the tokens this event's text came from, with their
	// log-probabilities when the request asked for them.
	Tokens []TokenLogprob
	// TopLogprobs holds, per token in Tokens, the most likely alternatives.
	TopLogprobs [][]TokenLogprob
	// ServerTool is a step of a tool call the server runs itself.
	ServerTool *ServerToolStep

	// Done marks the final event. Usage is set on it and, with the
	// prompt's figures (and CompletionTokens 1), on the first token's
	// event, so a dialect can report the cache use before the end.
	Done         bool
	FinishReason FinishReason
	// StopSequence is the stop string that ended generation, if any.
	StopSequence string
	Usage        Usage
	Err          error
}

// ModelInfo describes a model a node can serve.
type ModelInfo struct {
	ID      string
	Path    string
	Format  string // "safetensors" or "gguf"
	Kind    string // KindChat, KindEmbedding, KindRerank or KindTranscription
	Loaded  bool
	Created int64 // unix seconds (the model file's modification time)
}

// Generator runs requests. Generate returns once the request is admitted
// (or refused); events then arrive on the channel, which is closed after
// the final event. Cancelling ctx stops the generation and frees its slot.
type Generator interface {
	Generate(ctx context.Context, req *Request) (<-chan Event, error)
	Models(ctx context.Context) ([]ModelInfo, error)
	Tokenize(ctx context.Context, model string, req prompt.Request) (prompt.Result, error)
	Detokenize(ctx context.Context, model string, ids []int) (string, error)
}

// Model kinds: what a model answers.
const (
	KindChat      = "chat"      // generation (chat, completions, messages)
	KindEmbedding = "embedding" // embeddings
	KindRerank    = "rerank"    // cross-encoder scores of query–document pairs (/v1/rerank)
	// KindTranscription: speech to text (/v1/audio/transcriptions).
	KindTranscription = "transcription"
	// KindSpeech: text to speech (/v1/audio/speech).
	KindSpeech = "speech"
)

// The speed range of a speech request (OpenAI's): SpeechRequest.Speed,
// when not 0, lies within it.
const (
	MinSpeechSpeed = 0.25
	MaxSpeechSpeed = 4.0
)

// SpeechRequest is the dialect-neutral text-to-speech request.
type SpeechRequest struct {
	Model string
	Input string
	// Voice is one of the model's voices ("" : its default).
	Voice string
	// Speed multiplies the speaking rate (0: 1; else MinSpeechSpeed to
	// MaxSpeechSpeed): the voice's length scale is divided by it, so
	// speed 2 gives half the length.
	Speed float64
	// OnAudio is called with each sentence's audio as it is synthesized,
	// before Speak returns (a forwarded request's sentences arrive as the
	// peer makes them). An error stops the synthesis and is returned.
	OnAudio func(SpeechAudio) error
}

// SpeechAudio is the speech of one sentence: 16-bit mono PCM.
type SpeechAudio struct {
	SampleRate int
	PCM        []int16
}

// SpeechResult is what Speak made in all.
type SpeechResult struct {
	SampleRate int
	Samples    int // over all sentences
}

// Speaker turns text into speech. Errors: ErrModelNotFound,
// ErrUnavailable, ErrOverloaded, and *prompt.InvalidRequestError for bad
// input (empty or too long text, unknown voice, speed out of range, a
// model that does not speak).
type Speaker interface {
	Speak(ctx context.Context, req *SpeechRequest) (*SpeechResult, error)
}

// DefaultVoice is the name of a single-speaker voice model's only voice.
const DefaultVoice = "default"

// TranscribeRequest is the dialect-neutral speech-to-text request. The
// audio travels as uploaded (any format package audio decodes), so a
// forwarding node passes the file on and the node holding the model
// decodes it.
type TranscribeRequest struct {
	Model string
	Audio []byte
	// Language is the spoken language's code ("" : the model's, or
	// detected).
	Language string
	// Translate asks for an English translation instead of a transcript.
	Translate bool
	// Temperature is the first decoding temperature; on failure decoding
	// falls back to higher ones in steps of 0.2 up to 1 (OpenAI's
	// temperature 0 is greedy with fallback).
	Temperature float64
	// WordTimestamps times every word (TranscribeSegment.Words).
	WordTimestamps bool
	// MaxTokens caps the tokens decoded over the whole request,
	// timestamps included; the transcript ends where the cap falls (0:
	// no cap but the model's own per 30-s window; negative is invalid).
	MaxTokens int
	// MaxBytes and MaxSeconds cap the upload and its duration (0: the
	// engine's defaults, 25 MiB and 30 minutes).
	MaxBytes   int64
	MaxSeconds float64
	// OnSegment, if set, is called with each segment as it is decoded,
	// before Transcribe returns (a forwarded request's segments arrive as
	// the peer decodes them). It must not block for long.
	OnSegment func(TranscribeSegment)
	// VADFilter transcribes only the Speech segments (a VAD's, found by
	// the front end), put end to end, with the times taken back to the
	// original timeline: faster-whisper's vad_filter. No segments is no
	// speech: an empty transcript.
	VADFilter bool
	Speech    []SpeechRange
	// Batched (with VADFilter) transcribes the speech in pieces of at
	// most 30 s, each on its own without previous-text conditioning, as
	// faster-whisper's BatchedInferencePipeline: pieces are independent,
	// so a cluster spreads them over nodes. Pieces, when not zero, asks
	// for pieces [Pieces[0], Pieces[1]) only (TranscribePieces counts
	// them).
	Batched bool
	Pieces  [2]int
}

// TranscribeSegment is one timed piece of a transcript (faster-whisper's
// Segment fields; OpenAI's verbose_json segments).
type TranscribeSegment struct {
	ID               int
	Seek             int
	Start, End       float64
	Text             string
	Tokens           []int
	Temperature      float64
	AvgLogprob       float64
	CompressionRatio float64
	NoSpeechProb     float64
	Words            []TranscribeWord // with WordTimestamps
}

// TranscribeWord is one word of a segment with its times, in seconds.
type TranscribeWord struct {
	Start, End  float64
	Word        string
	Probability float64
}

// TranscribeResult is a transcript.
type TranscribeResult struct {
	Text     string
	Language string // code, e.g. "en"
	// LanguageProbability is the detected language's probability (1 when
	// the request named the language or the model knows only one),
	// faster-whisper's TranscriptionInfo.language_probability.
	LanguageProbability float64
	Duration            float64 // of the audio, in seconds
	Segments            []TranscribeSegment
}

// Transcriber turns speech into text. Errors: ErrModelNotFound,
// ErrUnavailable, ErrOverloaded, and *prompt.InvalidRequestError for bad
// input (not audio, truncated, too large or long, a language or task the
// model cannot do, a model that does not transcribe).
type Transcriber interface {
	Transcribe(ctx context.Context, req *TranscribeRequest) (*TranscribeResult, error)
}

// EmbedRequest is the dialect-neutral embeddings request: one vector per
// input.
type EmbedRequest struct {
	Model  string
	Inputs []EmbedInput
	// Dimensions > 0 keeps that many leading values of each vector and
	// renormalizes (Matryoshka models only); 0 keeps the model's.
	Dimensions int
	// NoTruncate makes an input longer than the model's limit an error
	// instead of cutting it to the limit.
	NoTruncate bool
	// Prompt, when set (even to ""), is put before every text input;
	// else PromptName names one of the model's prompts
	// (config_sentence_transformers.json, e.g. Qwen3-Embedding's "query"
	// instruction); else the model's default prompt, if any, is used — as
	// sentence-transformers' encode(prompt=, prompt_name=) does. Token-id
	// inputs take no prompt.
	Prompt     *string
	PromptName string
}

// EmbedInput is a text, or token ids (without special tokens) when
// Tokens is non-nil.
type EmbedInput struct {
	Text   string
	Tokens []int
}

// EmbedResult holds the vectors in input order.
type EmbedResult struct {
	Vectors [][]float32
	// PromptTokens counts the tokens the model ran, special ones included.
	PromptTokens int
	// Truncated lists the inputs cut to the model's limit, in order.
	Truncated []int
}

// Embedder computes embeddings. Errors: ErrModelNotFound, ErrUnavailable,
// ErrOverloaded, and *prompt.InvalidRequestError for bad input (no input,
// an empty one, too many, a model that does not embed, dimensions the
// model cannot give).
type Embedder interface {
	Embed(ctx context.Context, req *EmbedRequest) (*EmbedResult, error)
}

// RerankRequest is the dialect-neutral reranking request: one score per
// document for how well it answers the query (a cross-encoder reads the
// two together).
type RerankRequest struct {
	Model     string
	Query     string
	Documents []string
	// NoTruncate makes a query–document pair longer than the model's
	// limit an error instead of cutting it (longest side first).
	NoTruncate bool
}

// RerankResult holds the scores in document order (ordering and top_n
// are the dialect's business).
type RerankResult struct {
	Scores []float32
	// PromptTokens counts the tokens the model ran over all pairs,
	// special ones included.
	PromptTokens int
	// Truncated lists the documents whose pair was cut, in order.
	Truncated []int
}

// Reranker scores documents against a query. Errors as Embedder's, with
// *prompt.InvalidRequestError for an empty query, no documents, too
// many, an empty one, or a model that is not a cross-encoder.
type Reranker interface {
	Rerank(ctx context.Context, req *RerankRequest) (*RerankResult, error)
}

// Errors callers branch on (the HTTP layer maps them to status codes).
var (
	// ErrModelNotFound: no model of that name (404).
	ErrModelNotFound = errors.New("model not found")
	// ErrOverloaded: the queue is full (429, with a retry hint).
	ErrOverloaded = errors.New("server overloaded")
	// ErrUnavailable: the model exists but cannot be loaded now (503).
	ErrUnavailable = errors.New("model unavailable")
	// ErrUpstream: an upstream provider the request was sent to (a cloud
	// upstream, backend_override "cloud") could not be reached, or failed
	// on its side (502).
	ErrUpstream = errors.New("upstream provider failed")
)

// UpstreamError is a refusal of an upstream provider (its 4xx), passed
// back to the client with the provider's status and message.
type UpstreamError struct {
	Upstream string // the upstream's configured name
	Status   int    // the provider's HTTP status (400-499)
	Type     string // the provider's error type, if it gave one
	Message  string // the provider's message (never an API key)
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("upstream %q refused the request (%d): %s", e.Upstream, e.Status, e.Message)
}

// OverloadedError is the ErrOverloaded of a full node: it says why and
// when a retry is likely to be admitted. errors.Is(err, ErrOverloaded)
// holds for it.
type OverloadedError struct {
	Reason     string        // what is full, e.g. "64 requests in flight (limit 64)"
	RetryAfter time.Duration // a hint for the client's Retry-After (> 0)
}

func (e *OverloadedError) Error() string { return ErrOverloaded.Error() + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrOverloaded) true.
func (e *OverloadedError) Unwrap() error { return ErrOverloaded }

// RetryAfterSeconds is the whole seconds a client should wait before
// retrying after err (at least 1), for a Retry-After header: the hint of
// an *OverloadedError in err's chain, rounded up, or def.
func RetryAfterSeconds(err error, def int) int {
	var oe *OverloadedError
	if errors.As(err, &oe) && oe.RetryAfter > 0 {
		return max(1, int((oe.RetryAfter+time.Second-1)/time.Second))
	}
	return max(1, def)
}
