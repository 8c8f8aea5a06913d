// Package mcpserver serves fusion itself as an MCP server at /mcp, over
// streamable HTTP (the official Go SDK's server side), so MCP clients —
// Claude Desktop, Claude Code, any SDK — can use the cluster's models as
// tools: generate (a chat completion's text), embed (vectors) and
// list_models.
//
// Each tool converts its input into the engine's neutral request through
// the chat API's own converter (openai.ChatEngineRequest), so it is
// checked and bounded exactly as /v1/chat/completions is, and runs it on
// the node's generator: the dispatcher in a cluster, which forwards it to
// where the model is hot. The route sits behind the API key like /v1.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"fusion/engine"
	"fusion/router/openai"
	"fusion/router/requestid"
)

// Config is what the MCP server needs.
type Config struct {
	Engine  engine.Generator // embeddings too when it is an engine.Embedder
	Options openai.Options   // the chat API's limits (max_tokens cap, ...)
	Version string
	// MaxBodyBytes bounds a request body (the router's limit applies
	// first; 0: the SDK's default, 4 MiB).
	MaxBodyBytes int64
}

// New returns the /mcp handler. It is stateless: every request stands on
// its own (no Mcp-Session-Id), so any node of a cluster can answer any
// request of a client.
func New(cfg Config) *sdk.StreamableHTTPHandler {
	s := sdk.NewServer(&sdk.Implementation{Name: "fusion", Version: cfg.Version}, nil)
	t := &tools{cfg: cfg}
	sdk.AddTool(s, &sdk.Tool{Name: "generate", Description: "Generate text with one of the cluster's models: give a prompt (one user message) " +
		"or chat messages; the answer's text comes back."}, t.generate)
	sdk.AddTool(s, &sdk.Tool{Name: "embed", Description: "Embed texts with one of the cluster's embedding models: one vector per input."}, t.embed)
	sdk.AddTool(s, &sdk.Tool{Name: "list_models", Description: "List the models the cluster serves, with their kind (chat or embedding)."}, t.listModels)
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s },
		&sdk.StreamableHTTPOptions{Stateless: true, MaxRequestBodyBytes: cfg.MaxBodyBytes, PropagateRequestCancellation: true})
}

type tools struct{ cfg Config }

// Message is one chat message of generate's input.
type Message struct {
	Role    string `json:"role" jsonschema:"system, user or assistant"`
	Content string `json:"content"`
}

// GenerateInput is generate's input.
type GenerateInput struct {
	Model       string    `json:"model" jsonschema:"the model's id (list_models lists them)"`
	Prompt      string    `json:"prompt,omitempty" jsonschema:"the user's message (or give messages)"`
	Messages    []Message `json:"messages,omitempty" jsonschema:"the conversation, instead of prompt"`
	System      string    `json:"system,omitempty" jsonschema:"a system prompt put first"`
	MaxTokens   *int      `json:"max_tokens,omitempty" jsonschema:"the longest answer in tokens"`
	Temperature *float64  `json:"temperature,omitempty" jsonschema:"sampling temperature, 0 to 2"`
}

// GenerateOutput is generate's answer.
type GenerateOutput struct {
	Text             string `json:"text"`
	Model            string `json:"model"`
	FinishReason     string `json:"finish_reason"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
}

func (t *tools) generate(ctx context.Context, _ *sdk.CallToolRequest, in GenerateInput) (*sdk.CallToolResult, GenerateOutput, error) {
	var out GenerateOutput
	msgs := []Message{}
	if in.System != "" {
		msgs = append(msgs, Message{Role: "system", Content: in.System})
	}
	switch {
	case in.Prompt != "" && len(in.Messages) > 0:
		return nil, out, errors.New("give prompt or messages, not both")
	case in.Prompt != "":
		msgs = append(msgs, Message{Role: "user", Content: in.Prompt})
	case len(in.Messages) > 0:
		msgs = append(msgs, in.Messages...)
	default:
		return nil, out, errors.New("give a prompt or messages")
	}
	body, err := json.Marshal(map[string]any{"model": in.Model, "messages": msgs, "max_tokens": in.MaxTokens, "temperature": in.Temperature})
	if err != nil {
		return nil, out, err
	}
	var req openai.ChatRequest
	if e := openai.DecodeJSON(body, &req); e != nil {
		return nil, out, apiError(e)
	}
	ereq, _, e := openai.ChatEngineRequest(&req, t.cfg.Options, "mcp_"+requestid.New()[:24], nil)
	if e != nil {
		return nil, out, apiError(e)
	}
	events, err := t.cfg.Engine.Generate(ctx, ereq)
	if err != nil {
		return nil, out, apiError(openai.EngineError(err, in.Model))
	}
	var text strings.Builder
	for ev := range events {
		if ev.Err != nil {
			for range events {
			}
			return nil, out, apiError(openai.EngineError(ev.Err, in.Model))
		}
		text.WriteString(ev.Text)
		if ev.Done {
			out.FinishReason = openai.FinishReason(ev.FinishReason)
			out.PromptTokens, out.CompletionTokens = ev.Usage.PromptTokens, ev.Usage.CompletionTokens
		}
	}
	if out.FinishReason == "" {
		return nil, out, context.Canceled
	}
	out.Text, out.Model = text.String(), in.Model
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out.Text}}}, out, nil
}

// EmbedInput is embed's input.
type EmbedInput struct {
	Model string   `json:"model" jsonschema:"an embedding model's id (list_models lists them)"`
	Input []string `json:"input" jsonschema:"the texts to embed"`
}

// EmbedOutput is embed's answer: one vector per input, in order.
type EmbedOutput struct {
	Model      string      `json:"model"`
	Embeddings [][]float32 `json:"embeddings"`
	Tokens     int         `json:"prompt_tokens"`
}

func (t *tools) embed(ctx context.Context, _ *sdk.CallToolRequest, in EmbedInput) (*sdk.CallToolResult, EmbedOutput, error) {
	var out EmbedOutput
	emb, ok := t.cfg.Engine.(engine.Embedder)
	if !ok {
		return nil, out, errors.New("this server computes no embeddings")
	}
	if len(in.Input) == 0 {
		return nil, out, errors.New("input: give at least one text")
	}
	req := &engine.EmbedRequest{Model: in.Model}
	for i, s := range in.Input {
		if s == "" {
			return nil, out, fmt.Errorf("input[%d]: the text is empty", i)
		}
		req.Inputs = append(req.Inputs, engine.EmbedInput{Text: s})
	}
	res, err := emb.Embed(ctx, req)
	if err != nil {
		return nil, out, apiError(openai.EngineError(err, in.Model))
	}
	out.Model, out.Embeddings, out.Tokens = in.Model, res.Vectors, res.PromptTokens
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, out, err
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(raw)}}}, out, nil
}

// ModelInfo is one model of list_models.
type ModelInfo struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Loaded bool   `json:"loaded"`
}

// ListModelsOutput is list_models' answer.
type ListModelsOutput struct {
	Models []ModelInfo `json:"models"`
}

func (t *tools) listModels(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, ListModelsOutput, error) {
	out := ListModelsOutput{Models: []ModelInfo{}}
	models, err := t.cfg.Engine.Models(ctx)
	if err != nil {
		return nil, out, err
	}
	var names []string
	for _, m := range models {
		kind := m.Kind
		if kind == "" {
			kind = engine.KindChat
		}
		out.Models = append(out.Models, ModelInfo{ID: m.ID, Kind: kind, Loaded: m.Loaded})
		names = append(names, m.ID+" ("+kind+")")
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Join(names, "\n")}}}, out, nil
}

// apiError is an API error as a tool error: the field it names, then the
// message.
func apiError(e *openai.Error) error {
	if e.Param != "" && !strings.Contains(e.Message, e.Param) {
		return fmt.Errorf("%s: %s", e.Param, e.Message)
	}
	return errors.New(e.Message)
}
