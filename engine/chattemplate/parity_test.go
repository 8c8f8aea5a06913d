package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/internal/testenv"
)

// The parity suite renders every case with this package and with Python
// jinja2 set up as transformers' apply_chat_template does
// (testdata/render_reference.py), in one Python process, and requires
// byte-identical output.

// casesPerFamily is the number of generated conversations per template.
const casesPerFamily = 300

// pinnedNow is the instant strftime_now sees on both sides.
var pinnedNow = time.Date(2025, time.March, 7, 14, 5, 9, 0, time.UTC)

// families maps a template name to its fixture directory, template name
// within it, and generator.
var families = []struct {
	name     string
	fixture  string
	generate func(*gen) parityCase
	seed     uint64
	// markers must each appear in some identical rendering, so the
	// generator keeps reaching the template's branches.
	markers []string
	// file is the fixture file that marks the fixture there ("":
	// tokenizer.json); the template is read as FromTokenizerConfig does.
	file string
}{
	{"qwen3", "qwen3", (*gen).qwen3Case, 1, []string{
		"<tools>\n{", "<tool_call>\n{\"name\": ", "<tool_response>", "<think>\n\n</think>\n\n",
		"</think>\n\n", "<|im_start|>system\n", "<|im_start|>assistant\n"}, ""},
	{"llama3_1", "llama3_1", (*gen).llama31Case, 2, []string{
		"<|begin_of_text|><|start_header_id|>", "None<|eot_id|>", "[{'type': 'text', 'text': "}, ""},
	{"llama3_2", "llama3_2", (*gen).llama32Case, 3, []string{
		"Environment: ipython", "Given the following functions", "You have access to the following functions",
		"\"parameters\": {", "<|start_header_id|>ipython<|end_header_id|>", "Today Date: 07 Mar 2025", "Today Date: 29 Feb 2028"}, ""},
	{"deepseek_v3", "deepseek_v3", (*gen).deepseekCase, 4, []string{
		"<｜tool▁calls▁begin｜>", "<｜tool▁outputs▁begin｜>", "\n<｜tool▁output▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜Assistant｜>"}, ""},
	{"gemma3", "gemma3", (*gen).gemma3Case, 5, []string{
		"<bos><start_of_turn>user\n", "\n\n", "<start_of_image>", "<start_of_turn>model\n", "<end_of_turn>\n<start_of_turn>user\n"}, ""},
	{"gemma4", "gemma4", (*gen).gemma4Case, 6, []string{
		"<bos><|turn>system\n<|think|>\n", "<|tool>declaration:", "<|tool_call>call:", "<tool_call|><|tool_response>response:",
		"<|channel>thought\n", "<|turn>model\n<|channel>thought\n<channel|>", "<|image|>", "<|audio|>", "{value:<|\"|>"}, "chat_template.jinja"},
	// The templates llama.cpp keeps (scripts/fixtures.sh).
	{"qwen3_5", "qwen3_5", (*gen).qwen35Case, 7, []string{
		"<tools>\n{", "<tool_call>\n<function=", "\n<parameter=", "\n</parameter>\n</function>\n</tool_call>", "<tool_response>",
		"<|im_start|>assistant\n<think>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|vision_start|><|image_pad|><|vision_end|>",
		"<|vision_start|><|video_pad|><|vision_end|>", "Picture 1: "}, "chat_template.jinja"},
	{"glm4_5", "glm4_5", (*gen).glm45Case, 8, []string{
		"[gMASK]<sop><|system|>\n# Tools", "\n<tool_call>", "<arg_key>", "</arg_key>\n<arg_value>", "<|observation|>\n<tool_response>\n",
		"/nothink", "<|assistant|>\n<think></think>", "</think>\n", "<|assistant|>"}, "chat_template.jinja"},
	{"mistral_small3", "mistral_small3", (*gen).mistralSmallCase, 9, []string{
		"<s>[SYSTEM_PROMPT]You are Mistral Small 3", "The current date is 2025-03-07.", "[AVAILABLE_TOOLS][{", "[TOOL_CALLS]", "[CALL_ID]", "[ARGS]{",
		"[TOOL_RESULTS]", "[TOOL_CONTENT]", "[IMG]", "[/INST]"}, "chat_template.jinja"},
	{"ministral3_reasoning", "ministral3_reasoning", (*gen).ministral3ReasoningCase, 11, []string{
		"<s>[SYSTEM_PROMPT]# HOW YOU SHOULD THINK AND ANSWER", "[/SYSTEM_PROMPT][AVAILABLE_TOOLS][{", "[SYSTEM_PROMPT][THINK]",
		"[/INST][THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]{", "[TOOL_RESULTS]", "[IMG]", "</s>[INST]"}, "chat_template.jinja"},
	{"phi3_5", "phi3_5", (*gen).phi35Case, 10, []string{
		"<|system|>\n", "<|user|>\n", "<|end|>\n<|assistant|>\n", "<|end|>\n<|endoftext|>"}, "chat_template.jinja"},
}

type pyResult struct {
	ID        string `json:"id"`
	OK        bool   `json:"ok"`
	Output    string `json:"output"`
	ErrorType string `json:"error_type"`
	Error     string `json:"error"`
}

// runReference renders cases with Python. templates maps family names to
// sources.
func runReference(t *testing.T, templates map[string]string, cases []parityCase) map[string]pyResult {
	t.Helper()
	python := testenv.Python(t)

	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	slices.Sort(names)
	tmplObj := &Object{}
	for _, name := range names {
		tmplObj.Set(name, templates[name])
	}
	caseList := make([]any, len(cases))
	for i, c := range cases {
		special := &Object{}
		if c.bos != "" {
			special.Set("bos_token", c.bos)
		}
		if c.eos != "" {
			special.Set("eos_token", c.eos)
		}
		kwargs := &Object{}
		keys := make([]string, 0, len(c.input.Extra))
		for k := range c.input.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			kwargs.Set(k, c.input.Extra[k])
		}
		var tools any
		if c.input.Tools != nil {
			tools = c.input.Tools
		}
		messages := c.input.Messages
		if messages == nil {
			messages = []*Object{}
		}
		obj := NewObject(
			"id", c.id,
			"template", c.family,
			"messages", messages,
			"tools", tools,
			"add_generation_prompt", c.input.AddGenerationPrompt,
			"special_tokens", special,
			"kwargs", kwargs,
		)
		if c.conform != nil {
			obj.Set("conform", NewObject(
				"string_arguments", c.conform.StringArguments,
				"null_call_content", c.conform.NullCallContent))
		}
		caseList[i] = obj
	}
	request := NewObject(
		"now", pinnedNow.Format("2006-01-02T15:04:05"),
		"templates", tmplObj,
		"cases", caseList,
	)
	body, err := request.MarshalJSON()
	if err != nil {
		t.Fatalf("encode reference request: %v", err)
	}

	var response struct {
		Results []pyResult `json:"results"`
	}
	runScript(t, python, "render_reference.py", body, &response)
	results := make(map[string]pyResult, len(response.Results))
	for _, r := range response.Results {
		results[r.ID] = r
	}
	return results
}

// runScript runs testdata/script with body on stdin and decodes its JSON
// answer into out.
func runScript(t *testing.T, python, script string, body []byte, out any) {
	t.Helper()
	cmd := exec.Command(python, filepath.Join("testdata", script))
	cmd.Stdin = bytes.NewReader(body)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("decode the answer of %s: %v", script, err)
	}
}

// tally counts outcomes for one family.
type tally struct {
	identical, bothRaised, goLenient, mismatches int
	firstMismatch                                string
	mismatchIDs                                  []string
	// rendered holds identical outputs, for the marker check.
	rendered []string
	// byNote counts the outcomes of the invalid inputs, by what is wrong.
	byNote map[string]int
}

// compare checks one case against the reference and records the outcome.
func (s *tally) compare(c parityCase, ref pyResult, out string, err error) {
	var problem string
	var tmplErr *TemplateError
	switch {
	case ref.OK && err == nil && out == ref.Output && c.expect == expectRender:
		s.identical++
		s.rendered = append(s.rendered, out)
		return
	case ref.OK && err == nil && out == ref.Output:
		problem = fmt.Sprintf("expected %s, but both rendered", c.expect)
	case ref.OK && err == nil:
		problem = "outputs differ:\n" + lineDiff(ref.Output, out)
	case ref.OK:
		problem = fmt.Sprintf("Python rendered, Go failed: %v", err)
	case c.expect == expectRender:
		problem = fmt.Sprintf("Python failed (%s: %s) on a valid input", ref.ErrorType, ref.Error)
	case err != nil && !errors.As(err, &tmplErr):
		problem = fmt.Sprintf("Go failed with %T, not *TemplateError: %v", err, err)
	case c.expect == expectRaise && ref.ErrorType != "TemplateError":
		problem = fmt.Sprintf("expected raise_exception, Python failed with %s: %s", ref.ErrorType, ref.Error)
	case c.expect == expectRaise && (err == nil || !tmplErr.Raised || tmplErr.Message != ref.Error):
		problem = fmt.Sprintf("Python raised %q, Go returned (%q, %v)", ref.Error, out, err)
	case err != nil:
		s.bothRaised++
		s.count(c.note + ": both raised")
		return
	default: // expectInvalid, Python failed, Go rendered.
		s.goLenient++
		s.count(c.note + ": Go rendered, Python " + ref.ErrorType)
		return
	}
	s.mismatches++
	s.mismatchIDs = append(s.mismatchIDs, c.id)
	if s.firstMismatch == "" {
		s.firstMismatch = fmt.Sprintf("case %s (%s, expect %s):\n%s\ninput:\n%s",
			c.id, c.note, c.expect, problem, describeInput(c.input))
	}
}

func (s *tally) count(key string) {
	if s.byNote == nil {
		s.byNote = make(map[string]int)
	}
	s.byNote[key]++
}

func describeInput(in Input) string {
	var b strings.Builder
	for _, m := range in.Messages {
		j, _ := m.MarshalJSON()
		fmt.Fprintf(&b, "  message %s\n", j)
	}
	fmt.Fprintf(&b, "  tools=%d (nil=%v) add_generation_prompt=%v extra=%v\n",
		len(in.Tools), in.Tools == nil, in.AddGenerationPrompt, in.Extra)
	return b.String()
}

// lineDiff shows the first differing line of want and got with two lines
// of context, unified-diff style.
func lineDiff(want, got string) string {
	w := strings.SplitAfter(want, "\n")
	g := strings.SplitAfter(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "@@ line %d @@ (- python, + go)\n", i+1)
	for j := max(0, i-2); j < i; j++ {
		fmt.Fprintf(&b, "  %q\n", w[j])
	}
	for j := i; j < min(len(w), i+3); j++ {
		fmt.Fprintf(&b, "- %q\n", w[j])
	}
	for j := i; j < min(len(g), i+3); j++ {
		fmt.Fprintf(&b, "+ %q\n", g[j])
	}
	return b.String()
}

func TestParity(t *testing.T) {
	templates := make(map[string]string)
	var cases []parityCase
	for _, f := range families {
		src, err := FromTokenizerConfig(testenv.TokenizerFileDir(t, f.fixture, f.file))
		if err != nil {
			t.Fatal(err)
		}
		templates[f.name] = src
		g := newGen(f.seed)
		for i := range casesPerFamily {
			c := f.generate(g)
			c.id = fmt.Sprintf("%s-%03d", f.name, i)
			cases = append(cases, c)
		}
	}
	fc := featureCases()
	for name, src := range featureTemplates {
		templates[name] = src
	}
	cases = append(cases, fc...)

	ref := runReference(t, templates, cases)

	compiled := make(map[string]*Template, len(templates))
	for name, src := range templates {
		tmpl, err := New(src, WithClock(func() time.Time { return pinnedNow }))
		if err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
		compiled[name] = tmpl
	}

	byFamily := make(map[string]*tally)
	var order []string
	for _, c := range cases {
		group := c.family
		if _, ok := featureTemplates[group]; ok {
			group = "features"
		}
		s, ok := byFamily[group]
		if !ok {
			s = &tally{}
			byFamily[group] = s
			order = append(order, group)
		}
		r, ok := ref[c.id]
		if !ok {
			t.Fatalf("no reference result for %s", c.id)
		}
		in := c.input
		if c.bos != "" {
			in.BOSToken = c.bos
		}
		if c.eos != "" {
			in.EOSToken = c.eos
		}
		out, err := compiled[c.family].Render(in)
		s.compare(c, r, out, err)
	}

	for _, group := range order {
		s := byFamily[group]
		t.Run(group, func(t *testing.T) {
			total := s.identical + s.bothRaised + s.goLenient + s.mismatches
			t.Logf("%s: %d cases: %d rendered identical, %d both raised, %d Go lenient on input Python rejects, %d mismatches",
				group, total, s.identical, s.bothRaised, s.goLenient, s.mismatches)
			notes := make([]string, 0, len(s.byNote))
			for note, n := range s.byNote {
				notes = append(notes, fmt.Sprintf("%s: %d", note, n))
			}
			slices.Sort(notes)
			for _, note := range notes {
				t.Logf("  %s", note)
			}
			for _, f := range families {
				if f.name != group {
					continue
				}
				for _, m := range f.markers {
					if !slices.ContainsFunc(s.rendered, func(out string) bool { return strings.Contains(out, m) }) {
						t.Errorf("no rendering contains %q: the generator misses a branch", m)
					}
				}
			}
			if group != "features" && total < 200 {
				t.Errorf("only %d cases, want at least 200", total)
			}
			if s.mismatches > 0 {
				ids := s.mismatchIDs
				if len(ids) > 10 {
					ids = append(ids[:10:10], "...")
				}
				t.Errorf("%d mismatches (%s); first: %s", s.mismatches, strings.Join(ids, ", "), s.firstMismatch)
			}
		})
	}
}
