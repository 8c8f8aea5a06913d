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

// GGMLRef returns the reference libggml-base.so that
// `scripts/llamacpp.sh --ggml-ref` built ($FUSION_GGML_LIB, else the
// script's cache entry, looked up without building): llama.cpp's
// quantize_row_*_ref compiled with no fused multiply-adds, the oracle of
// engine/gguf's quantizers.
func GGMLRef(t testing.TB) string {
	t.Helper()
	if lib := os.Getenv("FUSION_GGML_LIB"); lib != "" {
		return lib
	}
	cmd := exec.Command("bash", filepath.Join(moduleRoot(), "scripts", "llamacpp.sh"), "--ggml-ref")
	cmd.Env = append(os.Environ(), "FUSION_LLAMACPP_NO_BUILD=1")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = errors.New(strings.TrimSpace(string(ee.Stderr)))
		}
		missing(t, "reference ggml-base not found (scripts/llamacpp.sh --ggml-ref, run by make test-deps, builds it): %v", err)
	}
	lib := filepath.Join(strings.TrimSpace(string(out)), "lib", "libggml-base.so")
	if _, err := os.Stat(lib); err != nil {
		missing(t, "reference ggml-base: %v", err)
	}
	return lib
}
