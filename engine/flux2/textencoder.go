package flux2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"fusion/engine/backend"
	"fusion/engine/chattemplate"
	"fusion/engine/model"
	"fusion/engine/tokenizer"
)

// The prompt encoding of Flux2KleinPipeline._get_qwen3_prompt_embeds.
const (
	// DefaultMaxSequenceLength is the pipeline's max_sequence_length: every
	// prompt is padded (or truncated) to this many tokens.
	DefaultMaxSequenceLength = 512
)

// TextLayers are the Qwen3 hidden states the pipeline stacks
// (output_hidden_states indices: the residual stream after 9, 18 and 27
// layers), concatenated per token in this order.
var TextLayers = []int{9, 18, 27}

// ErrEmptyPrompt: a prompt with no text.
var ErrEmptyPrompt = errors.New("flux2: empty prompt")

// TextEncoder turns a prompt into the transformer's text tokens, as
// FLUX.2 [klein]'s pipeline does: the prompt as one user message through
// the tokenizer's chat template (generation prompt, thinking disabled),
// tokenized, right-padded with the pad token to MaxLen (or truncated),
// through the Qwen3 text encoder under the padding mask, the hidden
// states of TextLayers concatenated per token. It reuses engine/model's
// Qwen3, loaded only up to the last layer it needs.
type TextEncoder struct {
	model  *model.Model
	tok    *tokenizer.Tokenizer
	tmpl   *chattemplate.Template
	pad    int
	MaxLen int
}

// LoadTextEncoder loads text_encoder/ and tokenizer/ of a checkpoint
// directory onto be.
func LoadTextEncoder(ctx context.Context, be backend.Backend, dir string) (*TextEncoder, error) {
	tokDir := filepath.Join(dir, TokenizerDir)
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return nil, fmt.Errorf("flux2: tokenizer: %w", err)
	}
	tmpl, err := chattemplate.New(tok.ChatTemplate())
	if err != nil {
		return nil, fmt.Errorf("flux2: tokenizer chat template: %w", err)
	}
	pad, err := padToken(tokDir, tok)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(ctx, filepath.Join(dir, TextEncoderDir), be, model.Options{Layers: model.Range{Start: 0, End: slices.Max(TextLayers)}})
	if err != nil {
		return nil, fmt.Errorf("flux2: text encoder: %w", err)
	}
	return &TextEncoder{model: m, tok: tok, tmpl: tmpl, pad: pad, MaxLen: DefaultMaxSequenceLength}, nil
}

// padToken is the id of tokenizer_config.json's pad_token (a string or an
// AddedToken object).
func padToken(dir string, tok *tokenizer.Tokenizer) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return 0, fmt.Errorf("flux2: tokenizer: %w", err)
	}
	var cfg struct {
		Pad json.RawMessage `json:"pad_token"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return 0, fmt.Errorf("flux2: tokenizer_config.json: %w", err)
	}
	var name string
	if err := json.Unmarshal(cfg.Pad, &name); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(cfg.Pad, &obj) != nil {
			return 0, fmt.Errorf("flux2: tokenizer_config.json: pad_token %s", cfg.Pad)
		}
		name = obj.Content
	}
	id, ok := tok.TokenID(name)
	if name == "" || !ok {
		return 0, fmt.Errorf("flux2: tokenizer: no pad token (%q)", name)
	}
	return id, nil
}

// Close releases the text encoder's weights.
func (e *TextEncoder) Close() error { return e.model.Close() }

// Width is the width of one text token, len(TextLayers)·hidden_size (the
// transformer's joint_attention_dim).
func (e *TextEncoder) Width() int { return len(TextLayers) * e.model.Config.HiddenSize }

// Tokens returns the prompt's MaxLen token ids and how many of them are
// the prompt's (the rest is padding).
func (e *TextEncoder) Tokens(prompt string) (ids []int, real int, err error) {
	if prompt == "" {
		return nil, 0, ErrEmptyPrompt
	}
	text, err := e.tmpl.Render(chattemplate.Input{
		Messages:            []*chattemplate.Object{chattemplate.NewObject("role", "user", "content", prompt)},
		AddGenerationPrompt: true,
		Extra:               map[string]any{"enable_thinking": false},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("flux2: prompt template: %w", err)
	}
	ids = e.tok.Encode(text, true)
	if len(ids) > e.MaxLen {
		ids = ids[:e.MaxLen]
	}
	real = len(ids)
	for len(ids) < e.MaxLen {
		ids = append(ids, e.pad)
	}
	return ids, real, nil
}

// Encode returns the prompt's text tokens, row-major [MaxLen, Width()]:
// per token the hidden states after each of TextLayers, side by side.
func (e *TextEncoder) Encode(ctx context.Context, prompt string) ([]float32, error) {
	ids, real, err := e.Tokens(prompt)
	if err != nil {
		return nil, err
	}
	states, err := e.model.PaddedStates(ctx, ids, real, TextLayers)
	if err != nil {
		return nil, fmt.Errorf("flux2: text encoder: %w", err)
	}
	h := e.model.Config.HiddenSize
	out := make([]float32, 0, len(ids)*e.Width())
	for t := range ids {
		for _, st := range states {
			out = append(out, st[t*h:(t+1)*h]...)
		}
	}
	return out, nil
}
