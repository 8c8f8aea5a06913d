package anthropic_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// TestPythonSDK runs the official anthropic Python library against live
// nodes (testdata/test_anthropic_python.py).
func TestPythonSDK(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import anthropic, pytest").CombinedOutput(); err != nil {
		if testenv.Required() {
			t.Fatalf("the anthropic and pytest Python packages are not installed in %s: %s", py, out)
		}
		t.Skipf("the anthropic and pytest Python packages are not installed in %s: %s (run `make test`, which installs them)", py, out)
	}
	models := nodetest.Models(t)
	nodetest.AddThinker(t, models)
	main := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	tight := nodetest.Start(t, nodetest.Options{MaxQueued: 1, ModelsDir: models})
	// small: an 8 KiB body limit, and a memory budget that the demo model,
	// pinned (an operator's setting), fills so that no other model fits.
	weights, err := os.Stat(filepath.Join(models, nodetest.Model, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	small := nodetest.Start(t, nodetest.Options{ModelsDir: models, MaxBodyBytes: 8 << 10, MemoryBudget: weights.Size() * 3 / 2})
	if err := small.Runner().Load(context.Background(), nodetest.Model); err != nil {
		t.Fatal(err)
	}
	if err := small.Runner().Pin(nodetest.Model); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"FUSION_BASE_URL="+main.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_TIGHT_URL="+tight.URL(), "FUSION_SMALL_URL="+small.URL(),
		"FUSION_MODEL="+nodetest.Model, "FUSION_THINKER="+nodetest.Thinker)
	ctx, cancel := testenv.ClientContext(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/test_anthropic_python.py")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	t.Log(string(out))
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(string(out)); m == nil || regexp.MustCompile(`failed|error`).MatchString(string(out)) {
		t.Errorf("unexpected pytest summary:\n%s", out)
	}
}
