package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/engine/demo"
	"fusion/internal/hubtest"
	"fusion/internal/mstest"
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
	commit := srv.AddModel(t, "demo-org/tiny", src)
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

	// The same revision in a Hugging Face cache: answered from it, the
	// Hub not asked; --force downloads.
	cache := t.TempDir()
	snap := filepath.Join(cache, "models--demo-org--tiny", "snapshots", commit)
	if err := os.CopyFS(snap, os.DirFS(filepath.Join(models, "tiny"))); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cache, "models--demo-org--tiny", "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "models--demo-org--tiny", "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	asked := len(srv.Requests())
	code, out, errs = pull("--models-dir", t.TempDir(), "--hf-cache", cache, "--hf-endpoint", srv.URL, "demo-org/tiny")
	if code != 0 || !strings.Contains(out, "demo-org/tiny: commit "+commit+" is complete in the Hugging Face cache") || !strings.Contains(out, snap) {
		t.Errorf("pull of a cached repo exited %d: %s %s", code, out, errs)
	}
	if got := srv.Requests()[asked:]; len(got) != 0 {
		t.Errorf("pull of a cached repo asked the Hub %v", got)
	}
	if code, out, errs := pull("--models-dir", t.TempDir(), "--hf-cache", cache, "--force", "--hf-endpoint", srv.URL, "demo-org/tiny"); code != 0 || !strings.HasPrefix(out, "tiny: ") {
		t.Errorf("a forced pull exited %d: %s %s", code, out, errs)
	}

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

// TestModelsPullModelScope: `fusion models pull --source modelscope`
// against the ModelScope stand-in, here (a private repo's 401 naming
// MODELSCOPE_API_TOKEN, then with the token) and as a node's job.
func TestModelsPullModelScope(t *testing.T) {
	srv := mstest.Start(t)
	src := filepath.Join(t.TempDir(), "src")
	if _, err := demo.Create(src, demo.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	srv.AddModel(t, "demo-org/tiny", src)
	srv.AddModel(t, "demo-org/locked", src)
	srv.Private("demo-org/locked", "tok")
	ctx := context.Background()
	pull := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"models", "pull"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	want, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
	same := func(got string) {
		t.Helper()
		if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s differs from the source (%v)", got, err)
		}
	}

	models := t.TempDir()
	code, out, errs := pull("--source", "modelscope", "--models-dir", models, "--modelscope-endpoint", srv.URL, "demo-org/tiny")
	if code != 0 || !strings.HasPrefix(out, "tiny: 5 files") || !strings.Contains(out, "commit master") {
		t.Fatalf("pull exited %d: %s %s", code, out, errs)
	}
	same(filepath.Join(models, "tiny", "model.safetensors"))
	t.Setenv("MODELSCOPE_ENDPOINT", srv.URL)
	code, _, errs = pull("--source", "modelscope", "--models-dir", t.TempDir(), "demo-org/locked")
	if code == 0 || !strings.Contains(errs, "401 Unauthorized") || !strings.Contains(errs, "MODELSCOPE_API_TOKEN") {
		t.Errorf("a private repo without a token: %d %s", code, errs)
	}
	t.Setenv("MODELSCOPE_API_TOKEN", "tok")
	if code, out, errs := pull("--source", "modelscope", "--models-dir", t.TempDir(), "--name", "unlocked", "demo-org/locked"); code != 0 || !strings.HasPrefix(out, "unlocked:") {
		t.Errorf("with the token: %d %s %s", code, out, errs)
	}
	if code, _, _ := pull("--source", "ftp", "demo-org/tiny"); code != 2 {
		t.Errorf("an unknown source: exit %d, want 2", code)
	}

	n := nodetest.Start(t, nodetest.Options{APIKey: "k", HF: node.HFConfig{ModelScopeEndpoint: srv.URL, MinFreeDisk: 1}})
	code, out, errs = pull("--source", "modelscope", "--addr", n.URL(), "--api-key", "k", "--name", "remote", "demo-org/tiny")
	if code != 0 || !strings.Contains(out, "remote: 5 files") || !strings.Contains(out, "on node") {
		t.Fatalf("pull on a node exited %d: %s %s", code, out, errs)
	}
	same(filepath.Join(n.ModelsDir(), "remote", "model.safetensors"))
}

// TestModelsPullPlacement: `fusion models pull --addr --replicas 2` on a
// 2-node cluster downloads to both nodes (here from ModelScope) and
// stores the placement; --replicas without --addr is a usage error.
func TestModelsPullPlacement(t *testing.T) {
	srv := mstest.Start(t)
	src := filepath.Join(t.TempDir(), "src")
	if _, err := demo.Create(src, demo.Options{Seed: 9}); err != nil {
		t.Fatal(err)
	}
	srv.AddModel(t, "demo-org/tiny", src)
	hf := node.HFConfig{ModelScopeEndpoint: srv.URL, MinFreeDisk: 1}
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", HF: hf, Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", HF: hf, Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range []*node.Node{a, b} {
		for {
			if _, err := n.Cluster().DownloadNodes("x", cluster.PlacementSpec{Replicas: 2}, 0); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%s's catalog: %v", n.Cluster().ID(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"models", "pull", "--source", "modelscope", "--addr", b.URL(), "--api-key", "k",
		"--name", "placed", "--replicas", "2", "demo-org/tiny"}, &out, &errb)
	if code != 0 || !strings.HasPrefix(out.String(), "placed: on ") || !strings.Contains(out.String(), "2 replica(s) of 1 stage(s); fetched to 2 node(s)") {
		t.Fatalf("pull exited %d: %s %s", code, out.String(), errb.String())
	}
	want, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
	for _, n := range []*node.Node{a, b} {
		if got, err := os.ReadFile(filepath.Join(n.ModelsDir(), "placed", "model.safetensors")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s's copy differs from the source (%v)", n.Cluster().ID(), err)
		}
	}
	if spec, ok := a.Cluster().PlacementSpecOf("placed"); !ok || spec.Replicas != 2 || len(spec.Pin) != 2 {
		t.Errorf("placement %+v %v", spec, ok)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"models", "pull", "--replicas", "2", "demo-org/tiny"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--addr") {
		t.Errorf("--replicas without --addr: exit %d: %s", code, errb.String())
	}
}
