package demo

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/chattemplate"
	"fusion/internal/testenv"
)

func writeDemo(t *testing.T, o Options) (string, *Model) {
	t.Helper()
	dir := t.TempDir()
	m, err := Create(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func runPython(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	py := testenv.Python(t)
	cmd := exec.Command(py, append([]string{"-c", script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	return out
}

// TestBuiltinTokenizerLoadsInHF loads the built-in tokenizer.json with
// Hugging Face tokenizers: it must round-trip text, keep the special
// tokens atomic, and use its merges.
func TestBuiltinTokenizerLoadsInHF(t *testing.T) {
	dir, m := writeDemo(t, Options{})
	texts := []string{
		"Hello, world! How are you today?",
		"def fibonacci(n):\n    return n\n",
		"Ünïcödé ✓ 日本語 🙂 e\u0301",
		"<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\n<tool_call>",
		"  multiple   spaces\n\n\nand newlines\t",
		"1234567890",
	}
	in, _ := json.Marshal(texts)
	out := runPython(t, `import json, sys
from tokenizers import Tokenizer
tk = Tokenizer.from_file(sys.argv[1])
res = []
for text in json.loads(sys.argv[2]):
    enc = tk.encode(text, add_special_tokens=False)
    res.append({"ids": enc.ids, "decoded": tk.decode(enc.ids, skip_special_tokens=False)})
print(json.dumps({"size": tk.get_vocab_size(with_added_tokens=True),
    "specials": [tk.token_to_id(s) for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</tool_response>"]],
    "skip": tk.decode(tk.encode("<|im_start|>a<think>b<|im_end|>").ids, skip_special_tokens=True),
    "res": res}))
`, filepath.Join(dir, TokenizerFile), string(in))
	var got struct {
		Size     int
		Specials []int
		Skip     string
		Res      []struct {
			IDs     []int
			Decoded string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	tk := m.Tokenizer
	if got.Size != len(tk.Tokens) {
		t.Errorf("HF vocab size %d, ours %d", got.Size, len(tk.Tokens))
	}
	want := []int{tk.Pad, tk.Pad + 1, tk.EOS, tk.EOS + 1, len(tk.Tokens) - 1}
	if !slices.Equal(got.Specials, want) {
		t.Errorf("special ids %v, want %v", got.Specials, want)
	}
	if got.Skip != "a<think>b" {
		t.Errorf("skip_special_tokens kept %q (non-special <think> must survive)", got.Skip)
	}
	for i, r := range got.Res {
		// HF applies NFC before encoding, so decoding yields the NFC form.
		if wantText := strings.ReplaceAll(texts[i], "e\u0301", "é"); r.Decoded != wantText {
			t.Errorf("%q decoded as %q", texts[i], r.Decoded)
		}
	}
	if ids := got.Res[0].IDs; len(ids) > len(texts[0])/2 {
		t.Errorf("%q took %d tokens: merges barely apply", texts[0], len(ids))
	}
	if ids := got.Res[3].IDs; ids[0] != tk.Pad+1 || !slices.Contains(ids, tk.EOS) {
		t.Errorf("special tokens not atomic: %v", ids)
	}
}

// TestChatTemplateJinja2 renders the built-in chat templates (Qwen3's
// kind, and Qwen3.5's kind for qwen3_5) with Python jinja2 configured as
// transformers configures it.
func TestChatTemplateJinja2(t *testing.T) {
	dir, _ := writeDemo(t, Options{})
	// Qwen3.5's kind, as the qwen3_5 demos carry it (TestFamiliesServed
	// checks that they do), without building one.
	cfg35 := filepath.Join(t.TempDir(), TokenizerConfigFile)
	if b, err := json.Marshal(map[string]string{"chat_template": builtinTemplate("qwen3_5"), "eos_token": "<|im_end|>"}); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(cfg35, b, 0o644); err != nil {
		t.Fatal(err)
	}
	type msg = map[string]any
	cases := []struct {
		name     string
		messages []msg
		tools    []msg
		kwargs   map[string]any
		want     string
		qwen35   bool
	}{
		{"user", []msg{{"role": "user", "content": "Hi"}}, nil, map[string]any{},
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", false},
		{"system, no thinking", []msg{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}}, nil,
			map[string]any{"enable_thinking": false},
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{"reasoning dropped from history", []msg{{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA"},
			{"role": "user", "content": "Q2"}}, nil, map[string]any{"enable_thinking": true},
			"<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n", false},
		{"tools", []msg{
			{"role": "system", "content": "S"},
			{"role": "user", "content": "Weather?"},
			{"role": "assistant", "content": "", "tool_calls": []msg{
				{"type": "function", "function": msg{"name": "get_weather", "arguments": msg{"city": "Paris"}}},
				{"type": "function", "function": msg{"name": "get_time", "arguments": `{"tz": "CET"}`}}}},
			{"role": "tool", "content": "20C"},
			{"role": "tool", "content": "12:00"},
		}, []msg{{"type": "function", "function": msg{"name": "get_weather", "parameters": msg{"type": "object"}}}}, map[string]any{},
			"<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"function": {"name": "get_weather", "parameters": {"type": "object"}}, "type": "function"}` + // keys as Go sent them
				"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
				"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nWeather?<|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
				"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n20C\n</tool_response>\n<tool_response>\n12:00\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n", false},
		{"qwen3.5: thinks by default", []msg{{"role": "user", "content": "Hi"}}, nil, map[string]any{},
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", true},
		{"qwen3.5: no thinking", []msg{{"role": "user", "content": "Hi"}}, nil, map[string]any{"enable_thinking": false},
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", true},
		{"qwen3.5: tools", []msg{
			{"role": "user", "content": "Weather?"},
			{"role": "assistant", "content": "Checking.", "tool_calls": []msg{
				{"type": "function", "function": msg{"name": "get_weather", "arguments": msg{"city": "Paris", "days": 3, "hourly": true, "at": []any{1, "x"}}}},
				{"type": "function", "function": msg{"name": "get_time", "arguments": msg{}}}}},
			{"role": "tool", "content": "20C"},
		}, []msg{{"type": "function", "function": msg{"name": "get_weather", "parameters": msg{"type": "object"}}}}, map[string]any{},
			"<|im_start|>system\n# Tools\n\nThese functions are available, their signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"function": {"name": "get_weather", "parameters": {"type": "object"}}, "type": "function"}` +
				"\n</tools>\n\nTo call a function, write one block per call, nothing after it:\n" +
				"<tool_call>\n<function=NAME>\n<parameter=PARAMETER>\nVALUE\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\nWeather?<|im_end|>\n" +
				"<|im_start|>assistant\nChecking.\n<tool_call>\n<function=get_weather>\n<parameter=at>\n[1, \"x\"]\n</parameter>\n" +
				"<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=hourly>\ntrue\n</parameter>\n</function>\n</tool_call>\n" +
				"<tool_call>\n<function=get_time>\n</function>\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n20C\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n", true},
	}
	// Every case in one Python process: a list of requests, a list of
	// renderings.
	var reqs []map[string]any
	for _, tc := range cases {
		cfg := filepath.Join(dir, TokenizerConfigFile)
		if tc.qwen35 {
			cfg = cfg35
		}
		reqs = append(reqs, map[string]any{"config": cfg, "messages": tc.messages, "tools": tc.tools, "kwargs": tc.kwargs})
	}
	in, _ := json.Marshal(reqs)
	out := runPython(t, `import json, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
outs = []
for req in json.loads(sys.argv[1]):
    cfg = json.load(open(req["config"]))
    outs.append(env.from_string(cfg["chat_template"]).render(messages=req["messages"], tools=req["tools"],
        add_generation_prompt=True, eos_token=cfg["eos_token"], **req["kwargs"]))
sys.stdout.write(json.dumps(outs))
`, string(in))
	var got []string
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(cases) {
		t.Fatalf("python answered %q: %v", out, err)
	}
	for i, tc := range cases {
		if got[i] != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got[i], tc.want)
		}
	}
}

// TestTemplateFrom writes a given template as chat_template.jinja (what
// the engine then renders) from a file or a model directory, and refuses
// a missing or empty one before building anything.
func TestTemplateFrom(t *testing.T) {
	src := filepath.Join(t.TempDir(), "t.jinja")
	const tmpl = "{{ messages[0].content }}!"
	if err := os.WriteFile(src, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, m := writeDemo(t, Options{TemplateFrom: src})
	got, err := chattemplate.FromTokenizerConfig(dir)
	if err != nil || got != tmpl || m.Tokenizer.ChatTemplate != tmpl {
		t.Fatalf("from a file: %q, %v (tokenizer %q)", got, err, m.Tokenizer.ChatTemplate)
	}
	// A directory's template: here the demo just written's.
	if got, err := readTemplate(dir); err != nil || got != tmpl {
		t.Fatalf("from a directory: %q, %v", got, err)
	}
	empty := filepath.Join(t.TempDir(), "empty.jinja")
	if err := os.WriteFile(empty, []byte(" \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "missing.jinja"), empty, t.TempDir()} {
		if _, err := Build(Options{TemplateFrom: bad}); err == nil {
			t.Errorf("TemplateFrom %s: no error", bad)
		}
	}
}

// TestVocabFrom copies real tokenizers and sizes the embedding from them.
func TestVocabFrom(t *testing.T) {
	tests := []struct {
		fixture  string
		vocab    int
		bos, eos int
		eosIDs   []int
		pre      string
	}{
		{"qwen3", 151680, 151643, 151645, []int{151645, 151643}, "qwen2"},
		{"llama3_2", 128256, 128000, 128009, []int{128009, 128001, 128008}, "llama-bpe"},
		// gpt-oss: <|return|>, <|endoftext|> and <|call|> end a generation,
		// as its generation_config.json says.
		{"gptoss", 200064, 199998, 200002, []int{200002, 199999, 200012}, "gpt-4o"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			src := testenv.TokenizerDir(t, tc.fixture)
			dir, m := writeDemo(t, Options{VocabFrom: src, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, Layers: 1})
			tk := m.Tokenizer
			if m.Params.Vocab != tc.vocab || m.Config["bos_token_id"] != tc.bos || tk.EOS != tc.eos || !slices.Equal(tk.EOSIDs, tc.eosIDs) || tk.Pre != tc.pre {
				t.Errorf("vocab %d bos %v eos %d eos ids %v pre %q", m.Params.Vocab, m.Config["bos_token_id"], tk.EOS, tk.EOSIDs, tk.Pre)
			}
			if tk.ChatTemplate == "" || len(tk.Merges) < 100000 {
				t.Errorf("template %d bytes, %d merges", len(tk.ChatTemplate), len(tk.Merges))
			}
			if tc.fixture == "gptoss" {
				// The package ships no template: the model gets Harmony.
				b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
				if err != nil || string(b) != chattemplate.Harmony || tk.ChatTemplate != chattemplate.Harmony {
					t.Errorf("chat_template.jinja: %v, %d bytes, not the Harmony template", err, len(b))
				}
			}
			for _, name := range []string{TokenizerFile, TokenizerConfigFile} {
				a, _ := os.ReadFile(filepath.Join(src, name))
				b, _ := os.ReadFile(filepath.Join(dir, name))
				if !bytes.Equal(a, b) {
					t.Errorf("%s not copied verbatim", name)
				}
			}
		})
	}
}
