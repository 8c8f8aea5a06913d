package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"fusion/engine/gguf"
)

// VocabGGUF is a vocabulary-only GGUF that --vocab-from may give instead
// of tokenizer.json (llama.cpp's vocab files; Gemma 4's fixture is one).
const VocabGGUF = "vocab.gguf"

// ggufTokenizerFiles returns, for a directory that has vocab.gguf but no
// tokenizer.json, the tokenizer.json and tokenizer_config.json the GGUF's
// tokenizer.ggml.* keys describe (gguf.File.TokenizerJSON): bos and eos
// tokens by id, the chat template from chat_template.jinja when present,
// else the GGUF's. nil when the directory has a tokenizer.json.
func ggufTokenizerFiles(dir string) (map[string][]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, TokenizerFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	path := filepath.Join(dir, VocabGGUF)
	if _, err := os.Stat(path); err != nil {
		return nil, nil
	}
	f, err := gguf.Open(path, gguf.LoadRead)
	if err != nil {
		return nil, fmt.Errorf("demo: tokenizer: %w", err)
	}
	defer f.Close()
	doc, err := f.TokenizerJSON()
	if err != nil {
		return nil, fmt.Errorf("demo: tokenizer: %w", err)
	}
	tokens, _ := f.Meta(gguf.KeyTokens).AsStrings()
	cfg := map[string]any{}
	for key, id := range map[string]func() (int, bool){"bos_token": f.BOS, "eos_token": f.EOS} {
		if i, ok := id(); ok && i >= 0 && i < len(tokens) {
			cfg[key] = tokens[i]
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "chat_template.jinja")); err != nil && f.ChatTemplate() != "" {
		cfg["chat_template"] = f.ChatTemplate()
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{TokenizerFile: doc, TokenizerConfigFile: conf}, nil
}
