package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Files of a model directory that Load reads (the first is required), by
// name; SourceFiles lists them for callers that must notice a change.
const (
	fileTokenizer        = "tokenizer.json"
	fileGenerationConfig = "generation_config.json"
	fileConfig           = "config.json"
	fileTokenizerConfig  = "tokenizer_config.json"
	fileSpecialTokensMap = "special_tokens_map.json"
	fileChatTemplate     = "chat_template.jinja"
	fileChatTemplateJSON = "chat_template.json"
	// AdditionalTemplatesDir holds named chat templates, one NAME.jinja
	// each; Load reads every .jinja file in it.
	AdditionalTemplatesDir = "additional_chat_templates"
)

// SourceFiles names the files of a model directory that Load reads, besides
// those in AdditionalTemplatesDir: what a cache of loaded tokenizers must
// watch to notice that a directory changed.
func SourceFiles() []string {
	return []string{fileTokenizer, fileGenerationConfig, fileConfig, fileTokenizerConfig, fileSpecialTokensMap, fileChatTemplate, fileChatTemplateJSON}
}

// Load reads the tokenizer of a model directory: tokenizer.json (required),
// and, when present, tokenizer_config.json, chat_template.jinja,
// chat_template.json, additional_chat_templates/*.jinja,
// generation_config.json, config.json and special_tokens_map.json for the
// special ids and chat templates.
//
// BOS and EOS come from the first file that names them, in the order
// generation_config.json, config.json, tokenizer_config.json,
// special_tokens_map.json (the first two give ids, EOS possibly a list; the
// others token texts).
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, fileTokenizer)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	files, err := readModelFiles(dir)
	if err != nil {
		return nil, err
	}
	if err := t.applyModelFiles(files); err != nil {
		return nil, err
	}
	return t, nil
}

// modelFiles holds the optional files of a model directory that Load reads.
type modelFiles struct {
	generation, config, tokenizerConfig, specialTokensMap *configJSON
	// paths of the parsed files, for error messages
	tokenizerConfigPath string
	jinjaTemplate       *string
	jsonTemplate        *string
	namedTemplates      map[string]string
}

// configJSON is the union of the fields Load reads from the JSON files.
type configJSON struct {
	BOSTokenID   json.RawMessage `json:"bos_token_id"`
	EOSTokenID   json.RawMessage `json:"eos_token_id"`
	TextConfig   *configJSON     `json:"text_config"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
	AddBOSToken  *bool           `json:"add_bos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

func readModelFiles(dir string) (*modelFiles, error) {
	f := &modelFiles{namedTemplates: map[string]string{}}
	for _, file := range []struct {
		name string
		dst  **configJSON
	}{
		{fileGenerationConfig, &f.generation},
		{fileConfig, &f.config},
		{fileTokenizerConfig, &f.tokenizerConfig},
		{fileSpecialTokensMap, &f.specialTokensMap},
	} {
		path := filepath.Join(dir, file.name)
		data, ok, err := readOptional(path)
		if err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		var cfg configJSON
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		*file.dst = &cfg
	}
	f.tokenizerConfigPath = filepath.Join(dir, fileTokenizerConfig)

	if data, ok, err := readOptional(filepath.Join(dir, fileChatTemplate)); err != nil {
		return nil, err
	} else if ok {
		s := string(data)
		f.jinjaTemplate = &s
	}
	path := filepath.Join(dir, fileChatTemplateJSON)
	if data, ok, err := readOptional(path); err != nil {
		return nil, err
	} else if ok {
		var cfg struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		f.jsonTemplate = &cfg.ChatTemplate
	}
	extra := filepath.Join(dir, AdditionalTemplatesDir)
	entries, err := os.ReadDir(extra)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".jinja")
		if !ok || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(extra, e.Name()))
		if err != nil {
			return nil, err
		}
		f.namedTemplates[name] = string(data)
	}
	return f, nil
}

// readOptional reads a file that may be missing.
func readOptional(path string) ([]byte, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// applyModelFiles sets the special ids and chat templates; it runs before
// the tokenizer is handed out.
func (t *Tokenizer) applyModelFiles(f *modelFiles) error {
	bos, eos, foundBOS, foundEOS := -1, []int(nil), false, false
	for _, cfg := range []*configJSON{f.generation, f.config, f.config.textConfig()} {
		if cfg == nil {
			continue
		}
		if ids := parseIDs(cfg.EOSTokenID); !foundEOS && len(ids) > 0 {
			eos, foundEOS = ids, true
		}
		if ids := parseIDs(cfg.BOSTokenID); !foundBOS && len(ids) > 0 {
			bos, foundBOS = ids[0], true
		}
	}
	for _, cfg := range []*configJSON{f.tokenizerConfig, f.specialTokensMap} {
		if cfg == nil {
			continue
		}
		if id, ok := t.tokenIDOf(cfg.EOSToken); !foundEOS && ok {
			eos, foundEOS = []int{id}, true
		}
		if id, ok := t.tokenIDOf(cfg.BOSToken); !foundBOS && ok {
			bos, foundBOS = id, true
		}
	}
	if foundBOS {
		t.bos = bos
	}
	if foundEOS {
		t.eos = sortedUnique(eos)
	}
	if cfg := f.tokenizerConfig; cfg != nil {
		if cfg.AddBOSToken != nil {
			t.addBOS = *cfg.AddBOSToken && t.bos >= 0
		}
		templates, err := parseChatTemplates(cfg.ChatTemplate)
		if err != nil {
			return fmt.Errorf("%s: chat_template: %w", f.tokenizerConfigPath, err)
		}
		for name, src := range templates {
			t.templates[name] = src
		}
	}
	if _, ok := t.templates["default"]; !ok && f.jsonTemplate != nil {
		t.templates["default"] = *f.jsonTemplate
	}
	if f.jinjaTemplate != nil {
		t.templates["default"] = *f.jinjaTemplate
	}
	for name, src := range f.namedTemplates {
		t.templates[name] = src
	}
	return nil
}

func (c *configJSON) textConfig() *configJSON {
	if c == nil {
		return nil
	}
	return c.TextConfig
}

// parseIDs reads a token id or a list of them; anything else gives nil.
func parseIDs(raw json.RawMessage) []int {
	if isNull(raw) {
		return nil
	}
	var id int
	if err := json.Unmarshal(raw, &id); err == nil {
		return []int{id}
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids
	}
	return nil
}

// tokenIDOf resolves a token given as a string or as an AddedToken object
// ({"content": ...}).
func (t *Tokenizer) tokenIDOf(raw json.RawMessage) (int, bool) {
	if isNull(raw) {
		return 0, false
	}
	var content string
	if err := json.Unmarshal(raw, &content); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return 0, false
		}
		content = obj.Content
	}
	if content == "" {
		return 0, false
	}
	return t.TokenID(content)
}

// parseChatTemplates reads tokenizer_config.json's chat_template: a string
// (the default template) or a list of {"name", "template"}.
func parseChatTemplates(raw json.RawMessage) (map[string]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var single string
	if err := json.Unmarshal(raw, &single); err == nil {
		return map[string]string{"default": single}, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("want a string or a list of {name, template}")
	}
	out := make(map[string]string, len(list))
	for _, entry := range list {
		if entry.Name == "" {
			return nil, errors.New("a template in the list has no name")
		}
		out[entry.Name] = entry.Template
	}
	return out, nil
}
