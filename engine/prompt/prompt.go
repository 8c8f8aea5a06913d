// Package prompt is the text side of a model: its tokenizer and chat
// template, loaded from a model directory or a GGUF file, turning a chat or
// a raw prompt into token ids and ids back into text. The /tokenize and
// /detokenize endpoints and `fusion tokenize` are thin layers over it.
package prompt

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"fusion/engine/chattemplate"
	"fusion/engine/gguf"
	"fusion/engine/tokenizer"
)

// ErrNoTemplate is returned when messages are given to a model without a
// chat template.
var ErrNoTemplate = errors.New("the model has no chat template")

// InvalidRequestError marks a request the caller got wrong (bad ids, a
// template that raised, neither prompt nor messages): a 400-class error.
type InvalidRequestError struct{ Err error }

func (e *InvalidRequestError) Error() string { return e.Err.Error() }
func (e *InvalidRequestError) Unwrap() error { return e.Err }

func invalid(format string, a ...any) error {
	return &InvalidRequestError{fmt.Errorf(format, a...)}
}

// Builder renders and tokenizes prompts for one model. It is safe for
// concurrent use.
type Builder struct {
	tok      *tokenizer.Tokenizer
	template *chattemplate.Template // nil when the model has none
	source   string                 // the template's source
	bos, eos string                 // token texts passed to the template
}

// Load reads the tokenizer and chat template of the model at path: a
// directory with tokenizer.json, or a .gguf file.
func Load(path string) (*Builder, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() && strings.HasSuffix(path, ".gguf") {
		return loadGGUF(path)
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return nil, err
	}
	return New(tok, tok.ChatTemplate())
}

func loadGGUF(path string) (*Builder, error) {
	f, err := gguf.Open(path, gguf.LoadMmap) // only metadata is read
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := f.TokenizerJSON()
	if err != nil {
		return nil, err
	}
	var opts []tokenizer.Option
	if id, ok := f.BOS(); ok {
		opts = append(opts, tokenizer.WithBOS(id))
	}
	if ids := f.StopTokens(); len(ids) > 0 {
		opts = append(opts, tokenizer.WithEOS(ids...))
	}
	tok, err := tokenizer.FromJSON(doc, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return New(tok, f.ChatTemplate())
}

// New builds a Builder from a tokenizer and a chat template source ("" for
// none).
func New(tok *tokenizer.Tokenizer, templateSource string) (*Builder, error) {
	b := &Builder{tok: tok, source: templateSource}
	if id, ok := tok.BOS(); ok {
		b.bos, _ = tok.Token(id)
	}
	if eos := tok.EOS(); len(eos) > 0 {
		b.eos, _ = tok.Token(eos[0])
	}
	if templateSource != "" {
		t, err := chattemplate.New(templateSource)
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		b.template = t
	}
	return b, nil
}

// TemplateSource is the chat template's Jinja source ("" for none).
func (b *Builder) TemplateSource() string { return b.source }

// Tokenizer returns the model's tokenizer.
func (b *Builder) Tokenizer() *tokenizer.Tokenizer { return b.tok }

// Request is what /tokenize takes: either Prompt, or Messages (with
// optional Tools) to render through the chat template.
type Request struct {
	Prompt              *string                `json:"prompt,omitempty"`
	Messages            []*chattemplate.Object `json:"messages,omitempty"`
	Tools               []*chattemplate.Object `json:"tools,omitempty"`
	AddGenerationPrompt *bool                  `json:"add_generation_prompt,omitempty"` // default true
	EnableThinking      *bool                  `json:"enable_thinking,omitempty"`       // omitted: undefined in the template
	// AddSpecialTokens adds BOS to a raw prompt where the tokenizer's
	// post-processor does (default true, as vLLM and HF do). Rendered
	// chats never get it: the template writes BOS itself.
	AddSpecialTokens *bool `json:"add_special_tokens,omitempty"`
	// ChatTemplateKwargs are extra template variables.
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs,omitempty"`
	// ContinueFinal renders the chat so that it ends inside the final
	// message (an assistant prefill): without a generation prompt, cut
	// right after that message's content.
	ContinueFinal bool `json:"continue_final_message,omitempty"`
	// StartThinking ends a generation prompt inside an open <think> block
	// when the template is a hybrid-reasoning one (it reads
	// enable_thinking and writes <think>) and did not open the block
	// itself: the answer then starts with reasoning, as Anthropic's
	// thinking: enabled promises. EnableThinking false wins. A template that always opens it
	// (DeepSeek-R1, Qwen3-Thinking) or knows no <think> is left as it is.
	// With Gemma 4's template and enable_thinking true it opens the
	// thought channel (<|channel>thought\n) instead.
	StartThinking bool `json:"start_thinking,omitempty"`
}

// Result is what /tokenize answers. Prompt is the rendered text when
// messages were given.
type Result struct {
	Tokens []int  `json:"tokens"`
	Count  int    `json:"count"`
	Prompt string `json:"prompt,omitempty"`
}

// Render renders the request's messages through the chat template.
func (b *Builder) Render(req Request) (string, error) {
	if b.template == nil {
		return "", &InvalidRequestError{ErrNoTemplate}
	}
	extra := make(map[string]any, len(req.ChatTemplateKwargs)+1)
	for k, v := range req.ChatTemplateKwargs {
		extra[k] = v
	}
	if req.EnableThinking != nil {
		extra["enable_thinking"] = *req.EnableThinking
	}
	in := chattemplate.Input{
		// Tool-call history in the form the template was trained on
		// (arguments as JSON text or an object, content null or "").
		Messages:            b.template.Shape().Conform(req.Messages),
		Tools:               req.Tools,
		AddGenerationPrompt: !req.ContinueFinal && (req.AddGenerationPrompt == nil || *req.AddGenerationPrompt),
		BOSToken:            b.bos,
		EOSToken:            b.eos,
		Extra:               extra,
	}
	text, err := b.template.Render(in)
	if err != nil {
		var te *chattemplate.TemplateError
		if errors.As(err, &te) {
			return "", &InvalidRequestError{fmt.Errorf("chat template: %w", err)}
		}
		return "", err
	}
	if req.ContinueFinal {
		return cutAfterFinal(text, req.Messages)
	}
	if req.StartThinking && (req.EnableThinking == nil || *req.EnableThinking) && in.AddGenerationPrompt && b.hybridThinking() && !inThinking(text) {
		text += thinkOpen
	}
	if req.StartThinking && req.EnableThinking != nil && *req.EnableThinking && in.AddGenerationPrompt &&
		strings.Contains(b.source, "<|channel>thought") && strings.HasSuffix(text, gemmaModelTurn) {
		// Gemma 4: enable_thinking leaves the thought channel to the
		// model; open it, as the template writes it in a history.
		text += gemmaThoughtOpen
	}
	return text, nil
}

// thinkOpen is what a hybrid Qwen3 model writes first when it thinks,
// and what DeepSeek-R1 and Qwen3-Thinking templates end their generation
// prompt with.
const thinkOpen = "<think>\n"

// Gemma 4's generation prompt with thinking on, and its thought channel
// as the model opens it.
const (
	gemmaModelTurn   = "<|turn>model\n"
	gemmaThoughtOpen = "<|channel>thought\n"
)

// hybridThinking reports whether the template lets the caller turn
// reasoning on and off (Qwen3's enable_thinking) around <think> blocks.
func (b *Builder) hybridThinking() bool {
	return strings.Contains(b.source, "enable_thinking") && strings.Contains(b.source, "<think>")
}

// inThinking reports whether text ends inside an open <think> block.
func inThinking(text string) bool {
	o := strings.LastIndex(text, "<think>")
	return o >= 0 && o > strings.LastIndex(text, "</think>")
}

// cutAfterFinal ends a rendered chat right after the final message's
// content (its last occurrence), dropping the end-of-turn the template
// wrote, so the model continues that message.
func cutAfterFinal(text string, msgs []*chattemplate.Object) (string, error) {
	if len(msgs) == 0 {
		return "", invalid("no message to continue")
	}
	cv, _ := msgs[len(msgs)-1].Get("content")
	content, _ := cv.(string)
	if content == "" {
		return "", invalid("the final message to continue is empty")
	}
	i := strings.LastIndex(text, content)
	if i < 0 {
		return "", invalid("the chat template does not render the final message's content as it is, so it cannot be continued")
	}
	return text[:i+len(content)], nil
}

// Tokenize turns the request into token ids.
func (b *Builder) Tokenize(req Request) (Result, error) {
	switch {
	case req.Prompt != nil && req.Messages != nil:
		return Result{}, invalid("give either prompt or messages, not both")
	case req.Prompt != nil:
		ids := b.encodeRaw(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
		return Result{Tokens: ids, Count: len(ids)}, nil
	case req.Messages != nil:
		if len(req.Messages) == 0 {
			return Result{}, invalid("messages must not be empty")
		}
		text, err := b.Render(req)
		if err != nil {
			return Result{}, err
		}
		ids := b.tok.Encode(text, false)
		return Result{Tokens: ids, Count: len(ids), Prompt: text}, nil
	}
	return Result{}, invalid("give prompt or messages")
}

// encodeRaw tokenizes text that is not a rendered chat. With addSpecial it
// starts with BOS where transformers would put one: the post-processor's
// template (Llama 3), or tokenizer_config.json's add_bos_token when the
// post-processor has none (DeepSeek V3) — never twice.
func (b *Builder) encodeRaw(text string, addSpecial bool) []int {
	ids := b.tok.Encode(text, addSpecial)
	if bos, ok := b.tok.BOS(); addSpecial && ok && b.tok.AddBOS() && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int{bos}, ids...)
	}
	return ids
}

// Detokenize turns ids back into text; an id outside the vocabulary is an
// error naming it.
func (b *Builder) Detokenize(ids []int) (string, error) {
	for i, id := range ids {
		if _, ok := b.tok.Token(id); !ok {
			return "", invalid("tokens[%d]: %d is not a token id of this model (vocabulary size %d)", i, id, b.tok.VocabSize())
		}
	}
	return b.tok.Decode(ids, false), nil
}
