package chattemplate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fusion/internal/testenv"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestTemplatesFromDir(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string]string
		want   map[string]string
		errHas string
	}{
		{
			name:  "string",
			files: map[string]string{"tokenizer_config.json": `{"eos_token": "x", "chat_template": "{{ 1 }}"}`},
			want:  map[string]string{"default": "{{ 1 }}"},
		},
		{
			name: "named list",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": [
				{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]}`},
			want: map[string]string{"default": "D", "tool_use": "T"},
		},
		{
			name: "jinja files win",
			files: map[string]string{
				"tokenizer_config.json":             `{"chat_template": [{"name": "default", "template": "old"}, {"name": "rag", "template": "R"}]}`,
				"chat_template.jinja":               "new\n",
				"additional_chat_templates/x.jinja": "X",
			},
			want: map[string]string{"default": "new\n", "rag": "R", "x": "X"},
		},
		{
			name:   "none",
			files:  map[string]string{"tokenizer_config.json": `{"chat_template": null}`},
			errHas: "no chat template",
		},
		{
			name:   "bad type",
			files:  map[string]string{"tokenizer_config.json": `{"chat_template": 3}`},
			errHas: "neither a string nor a list",
		},
		{
			name:   "bad json",
			files:  map[string]string{"tokenizer_config.json": `{`},
			errHas: "tokenizer_config.json",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Templates(writeFiles(t, tt.files))
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestNamedTemplate(t *testing.T) {
	dir := writeFiles(t, map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "tool_use", "template": "T"}]}`})
	if src, err := NamedTemplate(dir, "tool_use"); err != nil || src != "T" {
		t.Errorf("NamedTemplate(tool_use) = %q, %v", src, err)
	}
	if _, err := FromTokenizerConfig(dir); err == nil || !strings.Contains(err.Error(), "have tool_use") {
		t.Errorf("no default: err = %v", err)
	}
}

func TestFixtureTemplatesCompile(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "llama3_2", "deepseek_v3", "gemma3"} {
		src, err := FromTokenizerConfig(testenv.TokenizerDir(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(src); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
