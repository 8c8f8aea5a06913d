package parser

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Parser consumes generated text for one request.
type Parser interface {
	// Add consumes the next piece of generated text and returns what can be
	// emitted with certainty.
	Add(text string) Output
	// Finish flushes held-back text at the end of generation. The error is
	// non-nil only with Options.ErrorOnMalformed and a malformed call.
	Finish() (Output, error)
}

// Output is what one Add or Finish call produced.
type Output struct {
	Content   string
	Reasoning string
	// Calls are the tool calls completed by this step, whole.
	Calls []ToolCall
	// CallDeltas stream the same calls: per call one delta with Index, ID and
	// Name, then argument fragments (ArgumentsFragment) of the same Index.
	CallDeltas []ToolCallDelta
}

// Empty reports whether o carries nothing.
func (o Output) Empty() bool {
	return o.Content == "" && o.Reasoning == "" && len(o.Calls) == 0 && len(o.CallDeltas) == 0
}

// ToolCall is one complete tool call.
type ToolCall struct {
	Index     int
	ID        string
	Name      string
	Arguments string // compact JSON object text
	// Undeclared is set when Name is not among Options.Tools.
	Undeclared bool
}

// ToolCallDelta is one streaming piece of a tool call. The first delta of an
// Index carries ID and Name; later ones carry ArgumentsFragment only.
type ToolCallDelta struct {
	Index             int
	ID                string
	Name              string
	ArgumentsFragment string
}

// Options configure a Parser for one request.
type Options struct {
	// Tools are the declared tool names.
	Tools []string
	// StartInReasoning: the prompt ended inside an opened <think> block (see
	// StartInReasoning). Ignored by families without reasoning.
	StartInReasoning bool
	// ErrorOnMalformed drops malformed tool calls and makes Finish return an
	// error instead of returning their raw text as content.
	ErrorOnMalformed bool
	// StreamArguments streams a call's arguments while it is generated
	// (qwen3/hermes, llama3_json, qwen3_coder, glm45): the header delta goes out as
	// soon as the name is known, then argument fragments. The call is still
	// validated at its end; if it then turns out malformed (or disagrees with
	// what was streamed) it cannot be taken back, so it is dropped and Finish
	// returns an error wrapping ErrMalformedToolCall. This applies to every
	// malformed call whose name could be read, however the text was chunked,
	// so results never depend on chunking; a call whose name could not be
	// read is handled as without streaming. Without StreamArguments, a call's
	// deltas all come in the step that completes it. A dropped streamed
	// call's Index is not reused.
	StreamArguments bool
	// ParamTypes optionally maps tool name → parameter name → JSON Schema
	// type ("string", "integer", …). qwen3_coder and glm45 keep a "string" parameter
	// as a string even when it looks like a number or bool.
	ParamTypes map[string]map[string]string
	// NewID generates tool call IDs; nil means NewCallID.
	NewID func() string
}

// ErrMalformedToolCall is wrapped by Finish's error under
// Options.ErrorOnMalformed.
var ErrMalformedToolCall = errors.New("parser: malformed tool call")

// Family names.
const (
	Qwen3      = "qwen3"
	Hermes     = "hermes"
	Qwen3Coder = "qwen3_coder"
	Llama3JSON = "llama3_json"
	Mistral    = "mistral"
	// MistralArgs is Mistral read the same way, for templates that write
	// calls as [TOOL_CALLS]NAME[ARGS]{…} (Mistral Small 3.2, Devstral,
	// Magistral): a forced call is written in that form, not as a list.
	MistralArgs = "mistral_args"
	DeepSeekV3  = "deepseek_v3"
	// GLM45 is GLM-4.5/4.6's <tool_call>NAME<arg_key>…</arg_key><arg_value>…</arg_value> calls and <think>.
	GLM45 = "glm45"
	// Phi4Mini is Phi-4-mini's <|tool_call|>[…]<|/tool_call|> JSON calls.
	Phi4Mini = "phi4_mini"
	Harmony  = "harmony"
	Gemma4   = "gemma4"
	// Gemma4Think is Gemma 4's thought channel without tool calls.
	Gemma4Think = "gemma4_think"
	Think       = "think"
	None        = "none"
	Passthrough = "passthrough"
)

// registry holds the family constructors by name; never written after
// package initialisation.
var registry = families()

// aliases map names other servers use to ours.
var aliases = map[string]string{
	"json_tools":  Hermes,
	"qwen3_xml":   Qwen3Coder,
	"qwen2.5":     Hermes,
	"qwen":        Hermes,
	"llama3":      Llama3JSON,
	"llama":       Llama3JSON,
	"deepseek_r1": Think,
	"deepseek":    DeepSeekV3,
	"deepseekv3":  DeepSeekV3,
	// gpt-oss: vLLM calls its reasoning parser openai_gptoss and its tool
	// parser openai.
	"gpt_oss":        Harmony,
	"gpt-oss":        Harmony,
	"gptoss":         Harmony,
	"openai":         Harmony,
	"openai_gptoss":  Harmony,
	"gemma4_text":    Gemma4,
	"glm4_moe":       GLM45,
	"glm4.5":         GLM45,
	"glm-4.5":        GLM45,
	"glm4_5":         GLM45,
	"glm47":          GLM45,
	"phi4":           Phi4Mini,
	"phi4_mini_json": Phi4Mini,
	"gemma-4":        Gemma4,
	"":               None,
}

// Names lists the registered family names, sorted.
func Names() []string {
	var n []string
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func canonical(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		return a
	}
	return n
}

// New builds the parser of family name (aliases such as json_tools,
// qwen3_xml and deepseek_r1 are accepted).
func New(name string, opts Options) (Parser, error) {
	f, ok := registry[canonical(name)]
	if !ok {
		return nil, fmt.Errorf("parser: unknown parser %q", name)
	}
	if opts.NewID == nil {
		opts.NewID = NewCallID
	}
	return f(opts), nil
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// NewCallID returns "call_" followed by 24 random alphanumeric characters.
func NewCallID() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return "call_" + string(b[:])
}

// StartInReasoning reports whether a rendered prompt ends inside an opened
// <think> (or Mistral's [THINK]) block: its last <think> comes after its
// last </think>; or inside
// Gemma 4's thought channel, opened after its last <channel|>.
func StartInReasoning(prompt string) bool {
	for _, t := range [][2]string{{thinkOpen, thinkClose}, {mistralThinkOpen, mistralThinkClose}} {
		if o := strings.LastIndex(prompt, t[0]); o >= 0 && o > strings.LastIndex(prompt, t[1]) {
			return true
		}
	}
	o := strings.LastIndex(prompt, gemmaThoughtOpen)
	return o >= 0 && o > strings.LastIndex(prompt, gemmaThoughtClose)
}

// Detect chooses a parser name. A non-empty override (e.g. a tokenizer
// config's tool_parser_type, or an operator setting) wins and is returned in
// canonical form; otherwise the chat template text decides.
func Detect(chatTemplate string, override string) string {
	if strings.TrimSpace(override) != "" {
		return canonical(override)
	}
	t := chatTemplate
	hasThink := strings.Contains(t, "<think>")
	switch {
	case strings.Contains(t, gemmaCallOpen) && strings.Contains(t, gemmaThoughtClose):
		return Gemma4
	case strings.Contains(t, "<|channel|>"):
		return Harmony
	case strings.Contains(t, "tool▁calls▁begin"):
		return DeepSeekV3
	case strings.Contains(t, "[TOOL_CALLS]") && strings.Contains(t, mistralArgs):
		return MistralArgs
	case strings.Contains(t, "[TOOL_CALLS]"):
		return Mistral
	case strings.Contains(t, "<tool_call>") && strings.Contains(t, glmKeyOpen):
		return GLM45
	case strings.Contains(t, phi4CallOpen):
		return Phi4Mini
	case strings.Contains(t, "<tool_call>") && strings.Contains(t, "<function="):
		return Qwen3Coder
	case strings.Contains(t, "<tool_call>"):
		if hasThink {
			return Qwen3
		}
		return Hermes
	case strings.Contains(t, "<|python_tag|>") || strings.Contains(t, `"parameters": `) && strings.Contains(t, "<|start_header_id|>"):
		return Llama3JSON
	case hasThink:
		return Think
	}
	return None
}

// Markers lists the marker strings family name relies on: the detokenizer
// must keep them in the text it hands to the parser even when they are
// special tokens (e.g. <|python_tag|>, [TOOL_CALLS], DeepSeek's tool tokens).
func Markers(name string) []string {
	think := []string{thinkOpen, thinkClose}
	switch canonical(name) {
	case Qwen3, Hermes:
		return append(think, toolCallOpen, toolCallClose)
	case Qwen3Coder:
		return append(think, toolCallOpen, toolCallClose)
	case DeepSeekV3:
		return append(think, dsCallsBegin, dsCallBegin, dsSep, dsCallEnd, dsCallsEnd)
	case GLM45:
		return append(think, toolCallOpen, toolCallClose, glmKeyOpen, glmKeyClose, glmValueOpen, glmValueClose)
	case Phi4Mini:
		return []string{phi4CallOpen, phi4CallClose}
	case Llama3JSON:
		return []string{pythonTag}
	case Mistral, MistralArgs:
		return []string{mistralCalls, mistralArgs, mistralID, mistralThinkOpen, mistralThinkClose}
	case Think:
		return think
	case Harmony:
		return harmonyMarkers
	case Gemma4: // tokens: the thought channel opens with <|channel> then "thought"
		return []string{gemmaChannel, gemmaThoughtClose, gemmaCallOpen, gemmaCallClose, gemmaQuote, gemmaResponse}
	case Gemma4Think:
		return []string{gemmaChannel, gemmaThoughtClose}
	}
	return nil
}
