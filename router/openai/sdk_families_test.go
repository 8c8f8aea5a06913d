package openai_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/internal/race"
	"fusion/internal/testenv"
)

// TestPythonSDKFamilies serves random-weight demo models of families
// whose chat formats differ from harmony — a gemma3_text with Gemma 3's
// real tokenizer and template (no reasoning, no tool format of its own)
// a qwen3_5_moe with Qwen3's vocabulary (Qwen3.5's is not in the
// fixtures; the tokens its template writes are Qwen3's too) and Qwen3.5's real template
// (thinking by default, <tool_call><function=…> XML calls), and
// a gemma4_text with Gemma 4's (its vocab.gguf; thought channel, calls in
// its own notation) — and runs testdata/test_family_sdk.py, the official OpenAI and
// Anthropic Python SDKs, against the node that holds them and a cluster
// member that forwards to it. Under -race its set-up (two demo models
// with 262k- and 151k-token vocabularies, their grammar vocabularies)
// takes minutes in the race detector, and the forwarding paths it uses are
// raced by TestPythonSDKHarmony, so the race passes skip it and make test
// runs it without -race.
func TestPythonSDKFamilies(t *testing.T) {
	if race.Enabled {
		t.Skip("slow under -race; make test runs it without -race")
	}
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, anthropic, pytest").CombinedOutput(); err != nil {
		missing(t, "the openai, anthropic and pytest Python packages are not installed in %s: %s", py, out)
	}
	start := time.Now()
	models := t.TempDir()
	// family (test_family_sdk.py's key) → model name and demo options.
	fams := []struct {
		family, name string
		opts         demo.Options
	}{
		{"gemma3", "gemma3-demo", demo.Options{Arch: "gemma3_text", Seed: 16, VocabFrom: testenv.TokenizerDir(t, "gemma3"),
			Layers: 2, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, SlidingWindow: 16, SlidingPattern: 2, DType: "bf16"}},
		{"qwen3_5", "qwen35moe-demo", demo.Options{Arch: "qwen3_5_moe", Seed: 5, VocabFrom: testenv.TokenizerDir(t, "qwen3"),
			TemplateFrom: filepath.Join(testenv.TokenizerFileDir(t, "qwen3_5", "chat_template.jinja"), "chat_template.jinja"),
			Layers:       4, Hidden: 32, Heads: 2, KVHeads: 1, HeadDim: 16, Experts: 4, ExpertsPerTok: 2, MoEIntermediate: 32, DType: "bf16"}},
		{"gemma4", "gemma4-demo", demo.Options{Arch: "gemma4_text", Seed: 21, VocabFrom: testenv.TokenizerFileDir(t, "gemma4", "vocab.gguf"),
			Layers: 4, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, SlidingWindow: 16, SlidingPattern: 2, DType: "bf16"}},
	}
	var pairs []string
	for _, f := range fams {
		if _, err := demo.Create(filepath.Join(models, f.name), f.opts); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, f.family+"="+f.name)
	}
	warm := func(name string) map[string]any {
		return map[string]any{"model": name, "max_tokens": 1, "messages": []map[string]any{{"role": "user", "content": "hi"}}}
	}
	t.Logf("demo models written in %v", time.Since(start))
	a, c := forwardingCluster(t, models, "/v1/chat/completions", warm(fams[0].name))
	for _, f := range fams[1:] {
		var out struct {
			Error any `json:"error"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for post(t, c, "/v1/chat/completions", warm(f.name), &out) != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("c never forwarded %s to a: %+v", f.name, out.Error)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("cluster up, models loaded and forwarded in %v", time.Since(start))
	env := append(os.Environ(), "FUSION_BASE_URL="+a.URL(), "FUSION_FORWARD_URL="+c.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_MODELS="+strings.Join(pairs, ","))
	out := runSuite(t, env, py, "-m", "pytest", "-q", "--durations=5", "-p", "no:cacheprovider", "testdata/test_family_sdk.py")
	t.Log(out)
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(out); m == nil || regexp.MustCompile(`failed|error`).MatchString(out) {
		t.Errorf("unexpected pytest summary:\n%s", out)
	}
}
