package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// LlamaCpp returns the directory of the llama.cpp build scripts/llamacpp.sh
// made for this machine ($FUSION_LLAMACPP, else the script's cache entry,
// looked up without building): its lib/ holds libllama.so and llama-bench,
// its python/ the matching llama_cpp bindings (for PYTHONPATH).
func LlamaCpp(t testing.TB) string {
	t.Helper()
	dir, err := LlamaCppDir()
	if err != nil {
		missing(t, "llama.cpp build not found (scripts/llamacpp.sh, run by make test-deps, builds it): %v", err)
	}
	return dir
}

// LlamaCppDir is LlamaCpp for code without a testing.TB (the benchmarks).
func LlamaCppDir() (string, error) {
	dir := os.Getenv("FUSION_LLAMACPP")
	if dir == "" {
		cmd := exec.Command("bash", filepath.Join(moduleRoot(), "scripts", "llamacpp.sh"))
		cmd.Env = append(os.Environ(), "FUSION_LLAMACPP_NO_BUILD=1")
		out, err := cmd.Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return "", errors.New(strings.TrimSpace(string(ee.Stderr)))
			}
			return "", err
		}
		dir = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(dir, "lib", "llama-bench")); err != nil {
		return "", err
	}
	return dir, nil
}
