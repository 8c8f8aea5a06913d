package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/hubtest"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestModelsPull: `fusion models pull` against olah serving a demo model
// repo: here into --models-dir (with --include, and a gated repo's 401),
// and as a job of a running node (--addr) followed to its end.
func TestModelsPull(t *testing.T) {
	srv := hubtest.Start(t)
	src := filepath.Join(t.TempDir(), "src")
	if _, err := demo.Create(src, demo.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	srv.AddModel(t, "demo-org/tiny", src)
	srv.AddModel(t, "demo-org/locked", src)
	srv.Gate("demo-org/locked", "tok")
	ctx := context.Background()
	pull := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"models", "pull"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	same := func(got string) {
		t.Helper()
		a, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from the source", got)
		}
	}

	models := t.TempDir()
	code, out, errs := pull("--models-dir", models, "--hf-endpoint", srv.URL, "--include", "*.json", "--include", "*.safetensors", "demo-org/tiny")
	if code != 0 || !strings.HasPrefix(out, "tiny: 5 files") {
		t.Fatalf("pull exited %d: %s %s", code, out, errs)
	}
	same(filepath.Join(models, "tiny", "model.safetensors"))

	t.Setenv("HF_ENDPOINT", srv.URL)
	code, _, errs = pull("--models-dir", t.TempDir(), "demo-org/locked")
	if code == 0 || !strings.Contains(errs, "401 Unauthorized") || !strings.Contains(errs, "gated") {
		t.Errorf("a gated repo without a token: %d %s", code, errs)
	}
	if code, out, errs := pull("--models-dir", t.TempDir(), "--hf-token", "tok", "--name", "unlocked", "demo-org/locked"); code != 0 || !strings.HasPrefix(out, "unlocked:") {
		t.Errorf("with the token: %d %s %s", code, out, errs)
	}
	if code, _, _ := pull("not a repo"); code != 2 {
		t.Errorf("a bad repo: exit %d, want 2", code)
	}

	n := nodetest.Start(t, nodetest.Options{APIKey: "k", HF: node.HFConfig{Endpoint: srv.URL, MinFreeDisk: 1}})
	code, out, errs = pull("--addr", n.URL(), "--api-key", "k", "--name", "remote", "demo-org/tiny")
	if code != 0 || !strings.Contains(out, "remote: 5 files") || !strings.Contains(out, "on node") || !strings.Contains(errs, "job job-") {
		t.Fatalf("pull on a node exited %d: %s %s", code, out, errs)
	}
	same(filepath.Join(n.ModelsDir(), "remote", "model.safetensors"))
	code, _, errs = pull("--addr", n.URL(), "--api-key", "k", "demo-org/locked")
	if code == 0 || !strings.Contains(errs, "401 Unauthorized") {
		t.Errorf("a gated repo on a node: %d %s", code, errs)
	}
}
