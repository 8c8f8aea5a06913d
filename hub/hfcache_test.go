package hub_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"fusion/hub"
)

// TestFetchFromHFCache: a revision complete in the HF cache is answered
// from it without a request to the Hub; Force, allow patterns the
// snapshot cannot satisfy, another revision and ModelScope go to the
// server. (The layout as huggingface_hub writes it is tested in node's
// TestHFCache, filled by the official client.)
func TestFetchFromHFCache(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	cache := t.TempDir()
	root := filepath.Join(cache, "models--org--m")
	snap := filepath.Join(root, "snapshots", commit)
	if err := os.MkdirAll(filepath.Join(root, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"refs/main": commit, "snapshots/" + commit + "/config.json": "{}",
		"snapshots/" + commit + "/model.safetensors": "weights"} {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	hf := hub.New(hub.Options{Endpoint: srv.URL})
	ms := hub.New(hub.Options{Source: hub.SourceModelScope, Endpoint: srv.URL})
	models := t.TempDir()
	for _, tc := range []struct {
		name      string
		c         *hub.Client
		req       hub.Request
		force     bool
		fromCache bool
	}{
		{"main", hf, hub.Request{Repo: "org/m"}, false, true},
		{"the commit", hf, hub.Request{Repo: "org/m", Revision: commit}, false, true},
		{"patterns it has", hf, hub.Request{Repo: "org/m", Allow: []string{"*.json", "*.safetensors"}}, false, true},
		{"a pattern it lacks", hf, hub.Request{Repo: "org/m", Allow: []string{"*.gguf"}}, false, false},
		{"another revision", hf, hub.Request{Repo: "org/m", Revision: "v2"}, false, false},
		{"forced", hf, hub.Request{Repo: "org/m"}, true, false},
		{"ModelScope", ms, hub.Request{Repo: "org/m"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := asked.Load()
			res, err := hub.Fetch(context.Background(), tc.c, tc.req, hub.FetchOptions{ModelsDir: models, HFCache: cache, Force: tc.force})
			if !tc.fromCache {
				if err == nil || asked.Load() == before {
					t.Errorf("not from the cache: err %v, %d requests", err, asked.Load()-before)
				}
				return
			}
			if err != nil || asked.Load() != before {
				t.Fatalf("err %v, %d requests", err, asked.Load()-before)
			}
			want := hub.Result{Model: "org/m", Paths: []string{snap}, Commit: commit, Files: 2, Bytes: int64(len("{}") + len("weights")), FromCache: true}
			if res.Model != want.Model || len(res.Paths) != 1 || res.Paths[0] != snap || res.Commit != commit || res.Files != want.Files || res.Bytes != want.Bytes || !res.FromCache {
				t.Errorf("result %+v, want %+v", res, want)
			}
		})
	}
	if des, _ := os.ReadDir(models); len(des) != 0 {
		t.Errorf("the models dir got %v", des)
	}
}

// TestFetchFromHFCacheGGUF: a GGUF snapshot (no config.json) at a
// revision other than main answers a pull of it from the cache, named as
// the runner lists it: ORG/NAME/STEM@REV for each of its several GGUF
// files, the ones the allow patterns select.
func TestFetchFromHFCacheGGUF(t *testing.T) {
	const commit = "89abcdef0123456789abcdef0123456789abcdef"
	cache := t.TempDir()
	root := filepath.Join(cache, "models--org--g-GGUF")
	snap := filepath.Join(root, "snapshots", commit)
	for _, d := range []string{filepath.Join(root, "refs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"refs/v1": commit, "snapshots/" + commit + "/m-Q4_K_M.gguf": "q4",
		"snapshots/" + commit + "/m-Q8_0.gguf": "q8-q8", "snapshots/" + commit + "/README.md": "readme"} {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := hub.New(hub.Options{Endpoint: srv.URL})
	for _, tc := range []struct {
		name  string
		req   hub.Request
		model string
		paths []string
		bytes int64
	}{
		{"one quant by pattern", hub.Request{Repo: "org/g-GGUF", Revision: "v1", Allow: []string{"*Q8_0.gguf"}},
			"org/g-GGUF/m-Q8_0@v1", []string{"m-Q8_0.gguf"}, 5},
		{"all quants", hub.Request{Repo: "org/g-GGUF", Revision: commit},
			"org/g-GGUF/m-Q4_K_M@v1", []string{"m-Q4_K_M.gguf", "m-Q8_0.gguf"}, 7},
		{"a pattern naming no GGUF", hub.Request{Repo: "org/g-GGUF", Revision: "v1", Allow: []string{"README.md"}},
			"org/g-GGUF/m-Q4_K_M@v1", []string{"m-Q4_K_M.gguf", "m-Q8_0.gguf"}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := hub.Fetch(context.Background(), c, tc.req, hub.FetchOptions{ModelsDir: t.TempDir(), HFCache: cache})
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, p := range tc.paths {
				paths = append(paths, filepath.Join(snap, p))
			}
			if !res.FromCache || res.Model != tc.model || !slices.Equal(res.Paths, paths) || res.Commit != commit || res.Files != len(paths) || res.Bytes != tc.bytes {
				t.Errorf("result %+v, want %s at %v", res, tc.model, paths)
			}
		})
	}
	// main names nothing here, and a pattern the snapshot lacks: the Hub
	// is asked.
	for _, req := range []hub.Request{{Repo: "org/g-GGUF"}, {Repo: "org/g-GGUF", Revision: "v1", Allow: []string{"*Q6_K.gguf"}}} {
		if res, err := hub.Fetch(context.Background(), c, req, hub.FetchOptions{ModelsDir: t.TempDir(), HFCache: cache}); err == nil || res.FromCache {
			t.Errorf("%+v: %+v %v", req, res, err)
		}
	}
}
