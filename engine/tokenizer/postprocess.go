package tokenizer

import (
	"encoding/json"
	"fmt"
)

// specialWrap is what the post-processor adds around the ids of a single
// sequence when special tokens are requested.
type specialWrap struct {
	prefix, suffix []int
}

type postProcessorJSON struct {
	Type          string                       `json:"type"`
	Processors    []json.RawMessage            `json:"processors"`
	Single        []templatePieceJSON          `json:"single"`
	SpecialTokens map[string]templateTokenJSON `json:"special_tokens"`
	CLS           []json.RawMessage            `json:"cls"`
	SEP           []json.RawMessage            `json:"sep"`
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateTokenJSON struct {
	IDs []int `json:"ids"`
}

// buildPostProcessor reads a tokenizer.json "post_processor" value.
// ByteLevel only adjusts offsets, so it adds nothing here.
func buildPostProcessor(raw json.RawMessage) (specialWrap, error) {
	var wrap specialWrap
	if isNull(raw) {
		return wrap, nil
	}
	var cfg postProcessorJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return wrap, err
	}
	switch cfg.Type {
	case "ByteLevel":
		return wrap, nil
	case "Sequence":
		// Each processor wraps the result of the previous one.
		for i, sub := range cfg.Processors {
			inner, err := buildPostProcessor(sub)
			if err != nil {
				return wrap, fmt.Errorf("processors[%d]: %w", i, err)
			}
			wrap.prefix = append(inner.prefix, wrap.prefix...)
			wrap.suffix = append(wrap.suffix, inner.suffix...)
		}
		return wrap, nil
	case "TemplateProcessing":
		seen := false
		for i, piece := range cfg.Single {
			switch {
			case piece.Sequence != nil:
				if piece.Sequence.ID != "A" {
					return wrap, fmt.Errorf("TemplateProcessing: single[%d]: sequence %q in a single template", i, piece.Sequence.ID)
				}
				seen = true
			case piece.SpecialToken != nil:
				tok, ok := cfg.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return wrap, fmt.Errorf("TemplateProcessing: single[%d]: special token %q is not in special_tokens", i, piece.SpecialToken.ID)
				}
				if seen {
					wrap.suffix = append(wrap.suffix, tok.IDs...)
				} else {
					wrap.prefix = append(wrap.prefix, tok.IDs...)
				}
			default:
				return wrap, fmt.Errorf("TemplateProcessing: single[%d]: neither SpecialToken nor Sequence", i)
			}
		}
		return wrap, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenIDPair(cfg.CLS)
		if err != nil {
			return wrap, fmt.Errorf("%s: cls: %w", cfg.Type, err)
		}
		sep, err := tokenIDPair(cfg.SEP)
		if err != nil {
			return wrap, fmt.Errorf("%s: sep: %w", cfg.Type, err)
		}
		return specialWrap{prefix: []int{cls}, suffix: []int{sep}}, nil
	}
	return wrap, fmt.Errorf("unsupported post-processor type %q", cfg.Type)
}

// tokenIDPair reads a ["token", id] pair and returns the id.
func tokenIDPair(pair []json.RawMessage) (int, error) {
	var id int
	if len(pair) != 2 {
		return 0, fmt.Errorf("want [token, id], have %d elements", len(pair))
	}
	if err := json.Unmarshal(pair[1], &id); err != nil {
		return 0, err
	}
	return id, nil
}
