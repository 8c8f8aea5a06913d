package prompt

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/internal/testenv"
)

// demoModels writes the same demo model as a directory and as a GGUF file.
func demoModels(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{"safetensors": filepath.Join(dir, "demo"), "gguf": filepath.Join(dir, "demo.gguf")}
	// Built once per test binary (demotest); the files are this test's.
	demotest.Create(t, out["safetensors"], demo.Options{Arch: "qwen3", Seed: 1})
	demotest.Create(t, out["gguf"], demo.Options{Arch: "qwen3", Seed: 1, Format: demo.FormatGGUF})
	return out
}

func decodeRequest(t *testing.T, body string) Request {
	t.Helper()
	var r Request
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTokenizeDemo(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantPrompt string
	}{
		{"chat", `{"messages":[{"role":"user","content":"Hello there"}]}`,
			"<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"},
		{"chat no generation prompt", `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"add_generation_prompt":false}`,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"},
		{"thinking off", `{"messages":[{"role":"user","content":"hi"}],"enable_thinking":false}`,
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{"raw prompt", `{"prompt":"def add(a, b):\n    return a + b"}`, ""},
	}
	for format, path := range demoModels(t) {
		b, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		for _, tc := range tests {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				res, err := b.Tokenize(decodeRequest(t, tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if res.Prompt != tc.wantPrompt {
					t.Errorf("prompt %q, want %q", res.Prompt, tc.wantPrompt)
				}
				if res.Count != len(res.Tokens) || res.Count == 0 {
					t.Fatalf("count %d for %d tokens", res.Count, len(res.Tokens))
				}
				text := tc.wantPrompt
				if text == "" {
					text = *decodeRequest(t, tc.body).Prompt
				}
				back, err := b.Detokenize(res.Tokens)
				if err != nil || back != text {
					t.Errorf("detokenize = %q, %v; want %q", back, err, text)
				}
				// Special tokens in the rendered prompt are single ids.
				if strings.Contains(text, "<|im_start|>") {
					id, _ := b.Tokenizer().TokenID("<|im_start|>")
					if res.Tokens[0] != id {
						t.Errorf("first token %d, want <|im_start|> %d", res.Tokens[0], id)
					}
				}
			})
		}
	}
}

// TestSameTokensBothFormats: the GGUF file's embedded tokenizer and
// template give the same ids as the directory they describe.
func TestSameTokensBothFormats(t *testing.T) {
	models := demoModels(t)
	dir, err := Load(models["safetensors"])
	if err != nil {
		t.Fatal(err)
	}
	file, err := Load(models["gguf"])
	if err != nil {
		t.Fatal(err)
	}
	req := decodeRequest(t, `{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Add 12 and 30, then say ünïcödé 🙂"},{"role":"assistant","content":"42"},{"role":"user","content":"thanks"}]}`)
	a, err := dir.Tokenize(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := file.Tokenize(req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Tokens, b.Tokens) || a.Prompt != b.Prompt {
		t.Fatalf("directory %v\ngguf      %v", a.Tokens, b.Tokens)
	}
}

func TestLlamaBOS(t *testing.T) {
	b, err := Load(testenv.TokenizerDir(t, "llama3_2"))
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := b.Tokenizer().TokenID("<|begin_of_text|>")
	raw, err := b.Tokenize(decodeRequest(t, `{"prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.Tokens) != 2 || raw.Tokens[0] != bos {
		t.Errorf("raw prompt tokens %v, want BOS %d then one token", raw.Tokens, bos)
	}
	noSpecial, _ := b.Tokenize(decodeRequest(t, `{"prompt":"hi","add_special_tokens":false}`))
	if len(noSpecial.Tokens) != 1 {
		t.Errorf("add_special_tokens=false gave %v", noSpecial.Tokens)
	}
	chat, err := b.Tokenize(decodeRequest(t, `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"date_string":"29 Nov 2026"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(chat.Prompt, "<|begin_of_text|>"); n != 1 || chat.Tokens[0] != bos || chat.Tokens[1] == bos {
		t.Errorf("chat: %d BOS texts, tokens start %v: BOS must appear exactly once", n, chat.Tokens[:3])
	}
	if !strings.Contains(chat.Prompt, "Today Date: 29 Nov 2026") {
		t.Errorf("chat_template_kwargs not passed: %q", chat.Prompt)
	}
}

// TestDeepSeekBOS: DeepSeek V3's post-processor adds nothing, but its
// tokenizer_config.json says add_bos_token, so a raw prompt starts with BOS
// as transformers' tokenizer makes it; its chat template writes BOS itself.
func TestDeepSeekBOS(t *testing.T) {
	b, err := Load(testenv.TokenizerDir(t, "deepseek_v3"))
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := b.Tokenizer().TokenID("<｜begin▁of▁sentence｜>")
	raw, err := b.Tokenize(decodeRequest(t, `{"prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if raw.Tokens[0] != bos || raw.Tokens[1] == bos {
		t.Errorf("raw prompt tokens %v, want one BOS %d first", raw.Tokens, bos)
	}
	chat, err := b.Tokenize(decodeRequest(t, `{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if chat.Tokens[0] != bos || chat.Tokens[1] == bos {
		t.Errorf("chat tokens %v, want one BOS %d first", chat.Tokens[:3], bos)
	}
}

func TestErrors(t *testing.T) {
	b, err := Load(demoModels(t)["safetensors"])
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{}`,
		`{"prompt":"x","messages":[{"role":"user","content":"y"}]}`,
		`{"messages":[]}`,
	} {
		_, err := b.Tokenize(decodeRequest(t, body))
		var ire *InvalidRequestError
		if !errors.As(err, &ire) {
			t.Errorf("%s: error %v, want InvalidRequestError", body, err)
		}
	}
	_, err = b.Detokenize([]int{1, 1 << 30})
	var ire *InvalidRequestError
	if !errors.As(err, &ire) || !strings.Contains(err.Error(), "tokens[1]") {
		t.Errorf("detokenize bad id: %v", err)
	}
	// A template that raises is the caller's error too.
	raising, err := New(b.Tokenizer(), `{{ raise_exception("no tools here") }}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = raising.Tokenize(decodeRequest(t, `{"messages":[{"role":"user","content":"y"}]}`))
	if !errors.As(err, &ire) || !strings.Contains(err.Error(), "no tools here") {
		t.Errorf("raising template: %v", err)
	}
}

// TestStartThinking: a hybrid template's generation prompt is opened
// into a <think> block; one that opens it itself, one without thinking,
// a prefill and thinking turned off are rendered as they are.
func TestStartThinking(t *testing.T) {
	b, err := Load(demoModels(t)["safetensors"])
	if err != nil {
		t.Fatal(err)
	}
	const chat = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	// A hybrid template that opens the block itself when thinking is on.
	r1 := `{{- '<|im_start|>user\n' + messages[0].content + '<|im_end|>\n' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}` +
		`{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- else %}{{- '<think>\n' }}{%- endif %}{%- endif %}`
	r1Builder, err := New(b.Tokenizer(), r1)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(b.Tokenizer(), `{{- '<|im_start|>user\n' + messages[0].content + '<|im_end|>\n' }}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		b    *Builder
		body string
		want string
	}{
		{"hybrid, thinking on", b, `{"messages":[{"role":"user","content":"hi"}],"enable_thinking":true,"start_thinking":true}`, chat + "<think>\n"},
		{"hybrid, not asked", b, `{"messages":[{"role":"user","content":"hi"}],"enable_thinking":true}`, chat},
		{"hybrid, thinking off wins", b, `{"messages":[{"role":"user","content":"hi"}],"enable_thinking":false,"start_thinking":true}`, chat + "<think>\n\n</think>\n\n"},
		{"hybrid, prefill", b, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once"}],"start_thinking":true,"continue_final_message":true}`,
			"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nOnce"},
		{"hybrid, no generation prompt", b, `{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false,"start_thinking":true}`, "<|im_start|>user\nhi<|im_end|>\n"},
		{"template opens it", r1Builder, `{"messages":[{"role":"user","content":"hi"}],"start_thinking":true}`, chat + "<think>\n"},
		{"no thinking in the template", plain, `{"messages":[{"role":"user","content":"hi"}],"start_thinking":true}`, chat},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tc.b.Tokenize(decodeRequest(t, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if res.Prompt != tc.want {
				t.Errorf("prompt %q, want %q", res.Prompt, tc.want)
			}
			if back, _ := tc.b.Detokenize(res.Tokens); back != tc.want {
				t.Errorf("tokens decode to %q", back)
			}
		})
	}
}

// TestToolHistoryShape renders one tool exchange, as the OpenAI API
// carries it (arguments a JSON text, content null) and as the Anthropic
// API does (arguments an object, content ""), through real models' text
// sides: each template gets its arguments the way it prints them as JSON.
func TestToolHistoryShape(t *testing.T) {
	const (
		openAI = `{"messages":[{"role":"user","content":"Dim it."},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"dim","arguments":"{\"level\":0.35,\"nom\":\"salle à manger\",\"tag\":null}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"ok"}]}`
		anthropic = `{"messages":[{"role":"user","content":"Dim it."},` +
			`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"dim","arguments":{"level":0.35,"nom":"salle à manger","tag":null}}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"ok"}]}`
	)
	tests := []struct {
		fixture, api, body, want string
	}{
		// DeepSeek V3 prints arguments as they are: the client's text, or
		// the object written as JSON, never a Python dict.
		{"deepseek_v3", "openai", openAI, "```json\n{\"level\":0.35,\"nom\":\"salle à manger\",\"tag\":null}\n```"},
		{"deepseek_v3", "anthropic", anthropic, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>dim\n```json\n{\"level\": 0.35, \"nom\": \"salle à manger\", \"tag\": null}\n```"},
		// Qwen3 and Llama print an object with tojson.
		{"qwen3", "openai", openAI, "<|im_start|>assistant\n<tool_call>\n{\"name\": \"dim\", \"arguments\": {\"level\": 0.35, \"nom\": \"salle à manger\", \"tag\": null}}\n</tool_call><|im_end|>"},
		{"qwen3", "anthropic", anthropic, "{\"name\": \"dim\", \"arguments\": {\"level\": 0.35, \"nom\": \"salle à manger\", \"tag\": null}}"},
		{"llama3_2", "openai", openAI, "{\"name\": \"dim\", \"parameters\": {\"level\": 0.35, \"nom\": \"salle à manger\", \"tag\": null}}<|eot_id|>"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture+"/"+tc.api, func(t *testing.T) {
			b, err := Load(testenv.TokenizerDir(t, tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			res, err := b.Tokenize(decodeRequest(t, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Prompt, tc.want) {
				t.Errorf("prompt lacks %q:\n%s", tc.want, res.Prompt)
			}
			for _, bad := range []string{"{'", "None"} {
				if strings.Contains(res.Prompt, bad) {
					t.Errorf("prompt has a Python repr (%q):\n%s", bad, res.Prompt)
				}
			}
		})
	}
}
