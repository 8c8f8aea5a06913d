package tokenizer_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/tokenizer"
)

func TestLoadFixtures(t *testing.T) {
	tests := []struct {
		name      string
		vocabSize int
		eos       []int
		bos       int // -1: none
		addBOS    bool
		template  string // the default template starts with it
		tokens    map[string]int
		special   map[int]bool
	}{
		{"qwen3", 151669, []int{151645}, -1, false, "{%- if tools %}",
			map[string]int{"<|im_end|>": 151645, "<think>": 151667, "Ġthe": 279},
			map[int]bool{151643: true, 151645: true, 151667: false, 151657: false, 279: false}},
		{"llama3_1", 128256, []int{128009}, 128000, true, "{% set loop_messages",
			map[string]int{"<|begin_of_text|>": 128000, "<|eot_id|>": 128009},
			map[int]bool{128000: true, 128009: true, 1000: false}},
		{"llama3_2", 128256, []int{128009}, 128000, true, "{{- bos_token }}",
			map[string]int{"<|python_tag|>": 128010},
			map[int]bool{128010: true}},
		{"deepseek_v3", 128815, []int{1}, 0, true, "{% if not add_generation_prompt",
			map[string]int{"<｜begin▁of▁sentence｜>": 0, "<｜User｜>": 128803},
			map[int]bool{0: true, 1: true, 128803: false}},
		// gpt-oss (o200k_harmony) ships no chat template in the package;
		// its harmony markers are special tokens.
		{"gptoss", 200019, []int{200002}, 199998, false, "",
			map[string]int{"<|start|>": 200006, "<|channel|>": 200005, "<|message|>": 200008, "<|call|>": 200012, "Ġthe": 290},
			map[int]bool{200002: true, 200005: true, 200012: true, 290: false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := loadFixture(t, tt.name)
			if got := tok.VocabSize(); got != tt.vocabSize {
				t.Errorf("VocabSize() = %d, want %d", got, tt.vocabSize)
			}
			if got := tok.EOS(); !slices.Equal(got, tt.eos) {
				t.Errorf("EOS() = %v, want %v", got, tt.eos)
			}
			for _, id := range tt.eos {
				if !tok.IsEOS(id) {
					t.Errorf("IsEOS(%d) = false", id)
				}
			}
			bos, ok := tok.BOS()
			if (tt.bos >= 0) != ok || (ok && bos != tt.bos) {
				t.Errorf("BOS() = %d, %v; want %d", bos, ok, tt.bos)
			}
			if got := tok.AddBOS(); got != tt.addBOS {
				t.Errorf("AddBOS() = %v, want %v", got, tt.addBOS)
			}
			if got := tok.ChatTemplate(); !strings.HasPrefix(got, tt.template) {
				t.Errorf("ChatTemplate() starts %.40q, want %q", got, tt.template)
			}
			for text, id := range tt.tokens {
				if got, ok := tok.TokenID(text); !ok || got != id {
					t.Errorf("TokenID(%q) = %d, %v; want %d", text, got, ok, id)
				}
				if got, ok := tok.Token(id); !ok || got != text {
					t.Errorf("Token(%d) = %q, %v; want %q", id, got, ok, text)
				}
			}
			for id, want := range tt.special {
				if got := tok.IsSpecial(id); got != want {
					t.Errorf("IsSpecial(%d) = %v, want %v", id, got, want)
				}
			}
			if _, ok := tok.Token(tt.vocabSize); ok {
				t.Errorf("Token(%d) found past the vocabulary", tt.vocabSize)
			}
		})
	}
}

// writeModelDir writes a tiny tokenizer.json and the given files.
func writeModelDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	doc := tinyDoc{Added: []map[string]any{
		added(256, "<s>", true, false, false, false, false),
		added(257, "</s>", true, false, false, false, false),
		added(258, "<eot>", true, false, false, false, false),
	}}
	files["tokenizer.json"] = string(doc.json(t))
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadSpecialTokenOrder(t *testing.T) {
	tokenizerConfig := `{"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "add_bos_token": false}`
	tests := []struct {
		name   string
		files  map[string]string
		bos    int
		eos    []int
		addBOS bool
	}{
		{"generation_config first", map[string]string{
			"generation_config.json": `{"bos_token_id": 256, "eos_token_id": [258, 257, 258]}`,
			"config.json":            `{"bos_token_id": 1, "eos_token_id": 2}`,
			"tokenizer_config.json":  tokenizerConfig,
		}, 256, []int{257, 258}, false},
		{"then config.json", map[string]string{
			"config.json":           `{"bos_token_id": 1, "eos_token_id": 2}`,
			"tokenizer_config.json": tokenizerConfig,
		}, 1, []int{2}, false},
		{"then a vision model's text_config", map[string]string{
			"config.json":           `{"text_config": {"eos_token_id": [3, 4]}}`,
			"tokenizer_config.json": tokenizerConfig,
		}, 256, []int{3, 4}, false},
		{"then tokenizer_config.json", map[string]string{
			"tokenizer_config.json":   tokenizerConfig,
			"special_tokens_map.json": `{"bos_token": "<eot>", "eos_token": "<eot>"}`,
		}, 256, []int{257}, false},
		{"then special_tokens_map.json", map[string]string{
			"tokenizer_config.json":   `{"bos_token": null, "eos_token": "<unknown>"}`,
			"special_tokens_map.json": `{"bos_token": "<s>", "eos_token": {"content": "<eot>"}}`,
		}, 256, []int{258}, false},
		{"nothing", map[string]string{}, -1, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := tokenizer.Load(writeModelDir(t, tt.files))
			if err != nil {
				t.Fatal(err)
			}
			if bos, ok := tok.BOS(); bos != tt.bos || ok != (tt.bos >= 0) {
				t.Errorf("BOS() = %d, %v; want %d", bos, ok, tt.bos)
			}
			if got := tok.EOS(); !slices.Equal(got, tt.eos) {
				t.Errorf("EOS() = %v, want %v", got, tt.eos)
			}
			if got := tok.AddBOS(); got != tt.addBOS {
				t.Errorf("AddBOS() = %v, want %v", got, tt.addBOS)
			}
		})
	}
}

func TestLoadChatTemplates(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  map[string]string
	}{
		{"string", map[string]string{
			"tokenizer_config.json": `{"chat_template": "A"}`,
		}, map[string]string{"default": "A"}},
		{"list", map[string]string{
			"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "T"}]}`,
		}, map[string]string{"default": "A", "tool_use": "T"}},
		{"jinja file wins", map[string]string{
			"tokenizer_config.json": `{"chat_template": "A"}`,
			"chat_template.jinja":   "J",
			"chat_template.json":    `{"chat_template": "C"}`,
		}, map[string]string{"default": "J"}},
		{"chat_template.json", map[string]string{
			"chat_template.json": `{"chat_template": "C"}`,
		}, map[string]string{"default": "C"}},
		{"additional templates", map[string]string{
			"chat_template.jinja":                      "J",
			"additional_chat_templates/tool_use.jinja": "T",
			"additional_chat_templates/notes.txt":      "ignored",
		}, map[string]string{"default": "J", "tool_use": "T"}},
		{"none", map[string]string{}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := tokenizer.Load(writeModelDir(t, tt.files))
			if err != nil {
				t.Fatal(err)
			}
			got := tok.ChatTemplates()
			if len(got) != len(tt.want) {
				t.Errorf("ChatTemplates() = %v, want %v", got, tt.want)
			}
			for name, src := range tt.want {
				if got[name] != src {
					t.Errorf("ChatTemplates()[%q] = %q, want %q", name, got[name], src)
				}
			}
			if tok.ChatTemplate() != tt.want["default"] {
				t.Errorf("ChatTemplate() = %q, want %q", tok.ChatTemplate(), tt.want["default"])
			}
		})
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		file  string // the error names it
		want  string
	}{
		{"bad tokenizer_config.json", map[string]string{"tokenizer_config.json": `{"eos_token": `}, "tokenizer_config.json", "unexpected end of JSON"},
		{"bad chat_template", map[string]string{"tokenizer_config.json": `{"chat_template": 3}`}, "tokenizer_config.json", "chat_template"},
		{"bad generation_config.json", map[string]string{"generation_config.json": `[`}, "generation_config.json", "unexpected end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeModelDir(t, tt.files)
			_, err := tokenizer.Load(dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, tt.file)) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load: error %v, want one naming %s and containing %q", err, tt.file, tt.want)
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "WordLevel"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tokenizer.Load(dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tokenizer.json")) || !strings.Contains(err.Error(), `unsupported model type "WordLevel"`) {
		t.Errorf("Load of a WordLevel tokenizer.json: error %v", err)
	}
	if _, err := tokenizer.Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load of an empty directory: error %v", err)
	}
}
