package openai_test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// missing fails under FUSION_REQUIRE_FIXTURES=1 and skips otherwise.
func missing(t *testing.T, format string, a ...any) {
	t.Helper()
	if testenv.Required() {
		t.Fatalf(format, a...)
	}
	t.Skipf(format+" (run `make test`, which installs it)", a...)
}

// clientEnv starts the nodes a client suite talks to and returns its
// environment.
func clientEnv(t *testing.T) []string {
	models := nodetest.Models(t)
	main := nodetest.Start(t, nodetest.Options{APIKey: testKey, ModelsDir: models})
	tight := nodetest.Start(t, nodetest.Options{MaxQueued: 1, ModelsDir: models})
	return append(os.Environ(),
		"FUSION_BASE_URL="+main.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_TIGHT_URL="+tight.URL(), "FUSION_MODEL="+nodetest.Model)
}

// runSuite runs a client test suite and fails with its output if it fails.
func runSuite(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := testenv.ClientContext(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func TestPythonSDK(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, pytest").CombinedOutput(); err != nil {
		missing(t, "the openai and pytest Python packages are not installed in %s: %s", py, out)
	}
	out := runSuite(t, clientEnv(t), py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/test_openai_python.py")
	t.Log(out)
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(out); m == nil || regexp.MustCompile(`failed|error`).MatchString(out) {
		t.Errorf("unexpected pytest summary:\n%s", out)
	}
}

func TestNodeSDK(t *testing.T) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not on PATH")
	}
	env := append(os.Environ(), "NODE_PATH="+testenv.NodeModules())
	check := exec.Command(nodeBin, "-e", "require('openai')")
	check.Env = env
	if out, err := check.CombinedOutput(); err != nil {
		missing(t, "the openai npm package is not installed in %s: %s", testenv.NodeModules(), out)
	}
	env = append(clientEnv(t), "NODE_PATH="+testenv.NodeModules())
	out := runSuite(t, env, nodeBin, "--test", "--test-reporter=spec", "testdata/node/openai_sdk.test.cjs")
	t.Log(out)
	if m := regexp.MustCompile(`(?m)^ℹ fail 0$`).FindString(out); m == "" {
		t.Errorf("unexpected node test summary:\n%s", out)
	}
}
