package gguf

import (
	"encoding/json"
	"fmt"
	"strings"
)

// HFTokenizer is a Hugging Face byte-level BPE tokenizer to store as GGUF
// tokenizer metadata (the inverse of TokenizerJSON).
type HFTokenizer struct {
	// JSON is the tokenizer.json document.
	JSON []byte
	// Pre is the tokenizer.ggml.pre name of its pre-tokenizer: "qwen2",
	// "llama-bpe", "deepseek-v3" or "gpt-4o" (o200k: gpt-oss).
	Pre string
	// BOS and EOS are token ids; negative means none.
	BOS, EOS int
	// AddBOS is tokenizer_config.json's add_bos_token.
	AddBOS bool
	// ChatTemplate is stored as tokenizer.chat_template when not empty.
	ChatTemplate string
	// VocabSize pads the token list with unused "[PADn]" tokens up to the
	// model's embedding rows, as llama.cpp's converter does (0: no padding).
	VocabSize int
}

// TokenizerKVs returns the tokenizer.* metadata for h, laid out as
// llama.cpp's converter writes it: tokens by id (added tokens with their
// raw content), token types (control for special added tokens,
// user-defined for the others, unused for padding), merges as "a b".
func TokenizerKVs(h HFTokenizer) ([]KV, error) {
	if _, err := presetFor(h.Pre); err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	var doc struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Type   string          `json:"type"`
			Vocab  map[string]int  `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(h.JSON, &doc); err != nil {
		return nil, fmt.Errorf("gguf: tokenizer.json: %w", err)
	}
	if doc.Model.Type != "BPE" {
		return nil, fmt.Errorf("gguf: tokenizer.json: model type %q, want BPE", doc.Model.Type)
	}
	merges, err := parseMerges(doc.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("gguf: tokenizer.json: %w", err)
	}

	n := h.VocabSize
	for _, id := range doc.Model.Vocab {
		n = max(n, id+1)
	}
	for _, at := range doc.AddedTokens {
		n = max(n, at.ID+1)
	}
	if n > maxArrayLen {
		return nil, fmt.Errorf("gguf: tokenizer.json: token id %d too large", n-1)
	}
	tokens := make([]string, n)
	types := make([]int32, n)
	for tok, id := range doc.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("gguf: tokenizer.json: negative id %d for %q", id, tok)
		}
		if types[id] != 0 {
			return nil, fmt.Errorf("gguf: tokenizer.json: id %d is both %q and %q", id, tokens[id], tok)
		}
		tokens[id], types[id] = tok, TokenNormal
	}
	for _, at := range doc.AddedTokens {
		if at.ID < 0 {
			return nil, fmt.Errorf("gguf: tokenizer.json: negative id %d for %q", at.ID, at.Content)
		}
		tokens[at.ID], types[at.ID] = at.Content, TokenUserDefined
		if at.Special {
			types[at.ID] = TokenControl
		}
	}
	for id := range tokens {
		if types[id] == 0 {
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), TokenUnused
		}
	}

	kvs := []KV{
		{KeyTokenizerModel, String("gpt2")},
		{KeyTokenizerPre, String(h.Pre)},
		{KeyTokens, Array(tokens)},
		{KeyTokenType, Array(types)},
		{KeyMerges, Array(merges)},
	}
	if h.BOS >= 0 {
		kvs = append(kvs, KV{KeyBOS, Uint32(uint32(h.BOS))})
	}
	if h.EOS >= 0 {
		kvs = append(kvs, KV{KeyEOS, Uint32(uint32(h.EOS))})
	}
	kvs = append(kvs, KV{KeyAddBOS, Bool(h.AddBOS)})
	if h.ChatTemplate != "" {
		kvs = append(kvs, KV{KeyChatTemplate, String(h.ChatTemplate)})
	}
	return kvs, nil
}

// parseMerges accepts both spellings of BPE merges: "a b" strings and
// ["a", "b"] pairs (tokenizers ≥ 0.20).
func parseMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return []string{}, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges are neither strings nor pairs: %w", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || strings.Contains(p[0], " ") || strings.Contains(p[1], " ") {
			return nil, fmt.Errorf("merge %d is %q, want a pair of tokens without spaces", i, p)
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}
