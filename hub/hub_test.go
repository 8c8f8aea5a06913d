package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"fusion/engine/demo"
	"fusion/hub"
	"fusion/internal/hubtest"
)

// demoRepo writes a demo model directory (safetensors, a few MB so a
// throttled download can be stopped half way) plus two GGUF quants of
// the same model beside it, and returns the directory.
func demoRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if _, err := demo.Create(dir, demo.Options{Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Layers: 4, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q8_0", "q4_0"} {
		out := filepath.Join(t.TempDir(), "demo-"+q)
		if _, err := demo.Create(out, demo.Options{Format: demo.FormatGGUF, GGUFType: q, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(demo.GGUFPath(out))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "demo-"+q+".gguf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// sameFiles fails unless every file of want is in got with equal bytes.
func sameFiles(t *testing.T, got, want string, names ...string) {
	t.Helper()
	for _, n := range names {
		a, err := os.ReadFile(filepath.Join(got, n))
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		b, err := os.ReadFile(filepath.Join(want, n))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from the source (%d vs %d bytes)", n, len(a), len(b))
		}
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// TestFetch runs every download case against olah serving a demo model
// repo committed with git-lfs.
func TestFetch(t *testing.T) {
	srv := hubtest.Start(t)
	src := demoRepo(t)
	const repo = "demo-org/demo-model"
	srv.AddModel(t, repo, src)
	weights := repo + "/model.safetensors"
	st, err := os.Stat(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	client := hub.New(hub.Options{Endpoint: srv.URL})
	ctx := context.Background()

	t.Run("full download, byte for byte as huggingface_hub gets it", func(t *testing.T) {
		models := t.TempDir()
		res, err := hub.Fetch(ctx, client, hub.Request{Repo: repo}, hub.FetchOptions{ModelsDir: models})
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != "demo-model" || res.Files != 7 || res.Resumed != 0 {
			t.Errorf("result %+v", res)
		}
		all := []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "demo-q8_0.gguf", "demo-q4_0.gguf"}
		sameFiles(t, filepath.Join(models, "demo-model"), src, all...)
		if got := names(t, filepath.Join(models, hub.DownloadsDir)); len(got) != 0 {
			t.Errorf("staging left behind: %v", got)
		}
		official := t.TempDir()
		srv.HFDownload(t, repo, official)
		sameFiles(t, official, src, all...)
	})

	t.Run("allow_patterns: one GGUF quant", func(t *testing.T) {
		models := t.TempDir()
		res, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Allow: []string{"*q8_0.gguf"}}, hub.FetchOptions{ModelsDir: models})
		if err != nil {
			t.Fatal(err)
		}
		if got := names(t, models); !slices.Equal(got, []string{hub.DownloadsDir, "demo-q8_0.gguf"}) {
			t.Errorf("models dir holds %v", got)
		}
		if res.Model != "demo-q8_0" || res.Files != 1 {
			t.Errorf("result %+v", res)
		}
		sameFiles(t, models, src, "demo-q8_0.gguf")
		official := t.TempDir()
		srv.HFDownload(t, repo, official, "*q8_0.gguf")
		sameFiles(t, official, src, "demo-q8_0.gguf")
		if _, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Allow: []string{"*.bin"}}, hub.FetchOptions{ModelsDir: models}); !errors.Is(err, hub.ErrNoFiles) {
			t.Errorf("a pattern matching nothing: %v", err)
		}
	})

	t.Run("stopped at half, resumed from what is on disk", func(t *testing.T) {
		models := t.TempDir()
		srv.Throttle(2 << 20)
		defer srv.Throttle(0)
		before := srv.Fetched(weights)
		stop, cancel := context.WithCancel(ctx)
		var once sync.Once
		_, err := hub.Fetch(stop, client, hub.Request{Repo: repo, Allow: []string{"*.safetensors", "*.json"}}, hub.FetchOptions{ModelsDir: models,
			Progress: func(done, total int64) {
				if done >= total/2 {
					once.Do(cancel)
				}
			}})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped download: %v", err)
		}
		if _, err := os.Stat(filepath.Join(models, "demo-model")); err == nil {
			t.Fatal("a stopped download is in the models dir")
		}
		first := srv.Fetched(weights) - before
		if first <= 0 || first >= size {
			t.Fatalf("the first attempt fetched %d of %d bytes: not stopped part way", first, size)
		}
		srv.Throttle(0)
		res, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Allow: []string{"*.safetensors", "*.json"}}, hub.FetchOptions{ModelsDir: models})
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, filepath.Join(models, "demo-model"), src, "model.safetensors", "config.json")
		all := srv.Fetched(weights) - before
		t.Logf("weights %d bytes: %d fetched before the stop, %d in all, %d on disk at the restart", size, first, all, res.Resumed)
		if all > size+hub.ChunkSize {
			t.Errorf("fetched %d bytes of a %d-byte file across the stop: more than one chunk (%d) twice", all, size, hub.ChunkSize)
		}
		if res.Resumed == 0 {
			t.Error("the second attempt did not resume")
		}
	})

	t.Run("a corrupted file is detected and fetched again", func(t *testing.T) {
		models := t.TempDir()
		before := srv.Fetched(weights)
		srv.CorruptNext(weights)
		var log []string
		_, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Allow: []string{"model.safetensors", "config.json"}}, hub.FetchOptions{ModelsDir: models,
			Log: func(s string) { log = append(log, s) }})
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, filepath.Join(models, "demo-model"), src, "model.safetensors")
		if got := srv.Fetched(weights) - before; got != 2*size {
			t.Errorf("fetched %d bytes, want twice %d", got, size)
		}
		if !slices.ContainsFunc(log, func(s string) bool { return strings.Contains(s, "checksum mismatch") && strings.Contains(s, "again") }) {
			t.Errorf("the log does not tell the re-fetch: %q", log)
		}
	})

	t.Run("a gated repo without its token", func(t *testing.T) {
		const gated = "demo-org/gated-model"
		srv.AddModel(t, gated, src)
		srv.Gate(gated, "secret")
		_, err := hub.Fetch(ctx, client, hub.Request{Repo: gated}, hub.FetchOptions{ModelsDir: t.TempDir()})
		if !errors.Is(err, hub.ErrUnauthorized) {
			t.Fatalf("err %v, want 401", err)
		}
		for _, want := range []string{"401", "demo-org/gated-model@main is gated", "HF_TOKEN"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		wrong := hub.New(hub.Options{Endpoint: srv.URL, Token: "wrong"})
		if _, err := hub.Fetch(ctx, wrong, hub.Request{Repo: gated}, hub.FetchOptions{ModelsDir: t.TempDir()}); !errors.Is(err, hub.ErrUnauthorized) || !strings.Contains(err.Error(), "not accepted") {
			t.Errorf("a wrong token: %v", err)
		}
		models := t.TempDir()
		good := hub.New(hub.Options{Endpoint: srv.URL, Token: "secret"})
		if _, err := hub.Fetch(ctx, good, hub.Request{Repo: gated, Allow: []string{"*.json"}}, hub.FetchOptions{ModelsDir: models}); err != nil {
			t.Fatalf("with the token: %v", err)
		}
		sameFiles(t, filepath.Join(models, "gated-model"), src, "config.json")
	})

	t.Run("unknown repo", func(t *testing.T) {
		_, err := hub.Fetch(ctx, client, hub.Request{Repo: "demo-org/nothing"}, hub.FetchOptions{ModelsDir: t.TempDir()})
		if !errors.Is(err, hub.ErrUnauthorized) || !strings.Contains(err.Error(), "not found") {
			t.Errorf("err %v", err)
		}
	})

	t.Run("not enough disk space: refused before a byte is fetched", func(t *testing.T) {
		before := srv.Fetched(weights)
		models := t.TempDir()
		_, err := hub.Fetch(ctx, client, hub.Request{Repo: repo}, hub.FetchOptions{ModelsDir: models, MinFree: 1 << 20,
			FreeBytes: func(string) (int64, error) { return size, nil }})
		if !errors.Is(err, hub.ErrNoSpace) || !strings.Contains(err.Error(), "must stay free") {
			t.Fatalf("err %v", err)
		}
		if got := srv.Fetched(weights) - before; got != 0 {
			t.Errorf("%d bytes fetched before the refusal", got)
		}
		if got := names(t, models); len(got) != 0 {
			t.Errorf("a refused download left %v", got)
		}
	})

	t.Run("already there", func(t *testing.T) {
		models := t.TempDir()
		if err := os.Mkdir(filepath.Join(models, "demo-model"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := hub.Fetch(ctx, client, hub.Request{Repo: repo}, hub.FetchOptions{ModelsDir: models}); !errors.Is(err, hub.ErrExists) {
			t.Errorf("err %v", err)
		}
	})
}

// TestSearch: the query the Hub's /api/models takes, and its answer
// decoded (olah's offline mirror has no search, so this one server is
// written here, answering what the Hub documents).
func TestSearch(t *testing.T) {
	var got string
	var auth string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, auth = r.URL.String(), r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[{"_id":"x","id":"mlx-community/Qwen3-0.6B-4bit","author":"mlx-community","downloads":12,"likes":3,"tags":["mlx"],"library_name":"mlx","pipeline_tag":"text-generation","gated":false}]`))
	}))
	defer ts.Close()
	c := hub.New(hub.Options{Endpoint: ts.URL + "/", Token: "tok"})
	ms, err := c.Search(context.Background(), hub.SearchOptions{Search: "qwen3", Author: "mlx-community", Library: "mlx", Sort: "downloads", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/api/models?author=mlx-community&direction=-1&library=mlx&limit=100&search=qwen3&sort=downloads"; got != want {
		t.Errorf("query %s, want %s", got, want)
	}
	if auth != "Bearer tok" {
		t.Errorf("authorization %q", auth)
	}
	if len(ms) != 1 || ms[0].ID != "mlx-community/Qwen3-0.6B-4bit" || ms[0].Downloads != 12 || ms[0].LibraryName != "mlx" {
		t.Errorf("models %+v", ms)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.gguf", "a/b.gguf", true}, // fnmatch's * crosses folders
		{"*q4_k_m.gguf", "model-Q4_K_M.gguf", false},
		{"*Q4_K_M.gguf", "model-Q4_K_M.gguf", true},
		{"config.json", "config.json", true},
		{"config.json", "sub/config.json", false},
		{"onnx/", "onnx/model.onnx", true},
		{"model-0000?-of-00002.safetensors", "model-00001-of-00002.safetensors", true},
		{"[!a]*.json", "config.json", true},
		{"[!c]*.json", "config.json", false},
		{"tok[ei]*", "tokenizer.json", true},
		{"a.b", "axb", false},
	} {
		if got := hub.Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v", tc.pattern, tc.name, got)
		}
	}
}

// TestRedirectHeaders: a resolve answer that redirects to a CDN (as the
// Hub's do for LFS files) is checked with the X-Linked-Size and
// X-Linked-Etag of the redirect, not the CDN's own ETag; a redirect whose
// X-Linked-Etag disagrees with the listing is a checksum error.
func TestRedirectHeaders(t *testing.T) {
	content := []byte("weights")
	sum := "a6ac0e52a4ae57e0d62c15ba7a66d1b2e62ec94a2e6786aa8a8e26cdfe1e67a1" // not content's: set per case
	var linked string
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"`+strings.Repeat("e", 64)+`"`) // a CDN's own hash
		_, _ = w.Write(content)
	}))
	defer cdn.Close()
	hubSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Linked-Etag", `"`+linked+`"`)
		w.Header().Set("X-Linked-Size", "7")
		http.Redirect(w, r, cdn.URL+"/blob", http.StatusFound)
	}))
	defer hubSrv.Close()
	c := hub.New(hub.Options{Endpoint: hubSrv.URL})
	h := sha256.Sum256(content)
	good := hex.EncodeToString(h[:])
	for _, tc := range []struct {
		linked string
		ok     bool
	}{{good, true}, {sum, false}} {
		linked = tc.linked
		dst := filepath.Join(t.TempDir(), "f")
		err := c.DownloadFile(context.Background(), "o/r", "main", hub.File{Path: "f", Size: 7, SHA256: good}, dst, nil)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, hub.ErrChecksum)) {
			t.Errorf("X-Linked-Etag %s: %v", tc.linked[:8], err)
		}
	}
}
