package openai_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/testenv"
)

// harmonyModel is the gpt_oss demo model of TestPythonSDKHarmony.
const harmonyModel = "gptoss-demo"

// TestPythonSDKHarmony serves a random-weight gpt_oss demo model with
// gpt-oss's real tokenizer (and so the harmony format: its template,
// parser and forced-call grammar) and runs testdata/test_harmony_sdk.py —
// the official OpenAI and Anthropic Python SDKs — against the node that
// holds it and against a cluster member that forwards to it.
func TestPythonSDKHarmony(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, anthropic, pytest").CombinedOutput(); err != nil {
		missing(t, "the openai, anthropic and pytest Python packages are not installed in %s: %s", py, out)
	}
	models := t.TempDir()
	if _, err := demo.Create(filepath.Join(models, harmonyModel), demo.Options{Arch: "gpt_oss", Seed: 4,
		VocabFrom: testenv.TokenizerDir(t, "gptoss"), Layers: 2, Hidden: 32, Heads: 2, KVHeads: 1, MoEIntermediate: 32, DType: "bf16"}); err != nil {
		t.Fatal(err)
	}
	a, c := forwardingCluster(t, models, "/v1/chat/completions", map[string]any{
		"model": harmonyModel, "max_tokens": 1, "messages": []map[string]any{{"role": "user", "content": "hi"}}})
	env := append(os.Environ(), "FUSION_BASE_URL="+a.URL(), "FUSION_FORWARD_URL="+c.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_MODEL="+harmonyModel)
	out := runSuite(t, env, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/test_harmony_sdk.py")
	t.Log(out)
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(out); m == nil || regexp.MustCompile(`failed|error`).MatchString(out) {
		t.Errorf("unexpected pytest summary:\n%s", out)
	}
}
