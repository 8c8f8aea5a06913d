package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultName is the name of the template used when none is asked for.
const DefaultName = "default"

// FromTokenizerConfig returns the default chat template of the model
// directory dir (see Templates).
func FromTokenizerConfig(dir string) (string, error) {
	return NamedTemplate(dir, DefaultName)
}

// NamedTemplate returns the chat template called name (for example
// "default" or "tool_use") from the model directory dir.
func NamedTemplate(dir, name string) (string, error) {
	templates, err := Templates(dir)
	if err != nil {
		return "", err
	}
	src, ok := templates[name]
	if !ok {
		names := make([]string, 0, len(templates))
		for n := range templates {
			names = append(names, n)
		}
		slices.Sort(names)
		return "", fmt.Errorf("chattemplate: %s has no chat template named %q (have %s)", dir, name, strings.Join(names, ", "))
	}
	return src, nil
}

// Templates returns the chat templates of the model directory dir by name,
// looking where transformers does: chat_template.jinja (the default) and
// additional_chat_templates/NAME.jinja, then the chat_template field of
// tokenizer_config.json, which is either one template (the default) or a
// list of {"name": ..., "template": ...}. Files take precedence over the
// config field. It fails if dir holds no template at all.
func Templates(dir string) (map[string]string, error) {
	templates := make(map[string]string)
	if err := templatesFromConfig(dir, templates); err != nil {
		return nil, err
	}
	if err := templatesFromFiles(dir, templates); err != nil {
		return nil, err
	}
	if len(templates) == 0 {
		return nil, fmt.Errorf("chattemplate: no chat template in %s", dir)
	}
	return templates, nil
}

func templatesFromConfig(dir string, into map[string]string) error {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chattemplate: %w", err)
	}
	var config struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &config); err != nil {
		return fmt.Errorf("chattemplate: %s: %w", path, err)
	}
	raw := config.ChatTemplate
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var single string
	if err := json.Unmarshal(raw, &single); err == nil {
		into[DefaultName] = single
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("chattemplate: %s: chat_template is neither a string nor a list of {name, template}: %w", path, err)
	}
	for _, t := range list {
		if t.Name == "" {
			return fmt.Errorf("chattemplate: %s: chat_template entry without a name", path)
		}
		into[t.Name] = t.Template
	}
	return nil
}

func templatesFromFiles(dir string, into map[string]string) error {
	data, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	switch {
	case err == nil:
		into[DefaultName] = string(data)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("chattemplate: %w", err)
	}
	extra, err := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	if err != nil {
		return fmt.Errorf("chattemplate: %w", err)
	}
	for _, path := range extra {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("chattemplate: %w", err)
		}
		into[strings.TrimSuffix(filepath.Base(path), ".jinja")] = string(data)
	}
	return nil
}
