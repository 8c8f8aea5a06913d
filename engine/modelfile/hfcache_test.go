package modelfile

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// hfRepo lays out repo in the HF cache cache the way huggingface_hub does:
// refs/<ref> names commit, snapshots/<commit>/<file> are relative links
// into blobs/. files maps a path to its content.
func hfRepo(t *testing.T, cache, repo, ref, commit string, files map[string]string) string {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	snap := filepath.Join(root, "snapshots", commit)
	for _, d := range []string{filepath.Join(root, "refs"), filepath.Join(root, "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if ref != "" {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, "refs", ref)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "refs", ref), []byte(commit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range files {
		blob := filepath.Join(root, "blobs", strings.ReplaceAll(name, "/", "_")+"-"+commit[:6])
		if err := os.WriteFile(blob, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(snap, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(filepath.Dir(link), blob)
		if err := os.Symlink(rel, link); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

func TestHFCacheDiscovery(t *testing.T) {
	const c1, c2, c3 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222", "3333333333333333333333333333333333333333"
	cache := t.TempDir()
	index := `{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	whole := hfRepo(t, cache, "org/sharded", "main", c1, map[string]string{"config.json": "{}", "model.safetensors.index.json": index,
		"model-00001-of-00002.safetensors": "x", "model-00002-of-00002.safetensors": "y"})
	hfRepo(t, cache, "org/missing-shard", "main", c1, map[string]string{"config.json": "{}", "model.safetensors.index.json": index,
		"model-00001-of-00002.safetensors": "x"})
	hfRepo(t, cache, "org/no-config", "main", c1, map[string]string{"model.safetensors": "x"})
	hfRepo(t, cache, "org/no-weights", "main", c1, map[string]string{"config.json": "{}"})
	single := hfRepo(t, cache, "org/single", "main", c1, map[string]string{"config.json": "{}", "model.safetensors": "x"})
	tagged := hfRepo(t, cache, "org/single", "v1", c2, map[string]string{"config.json": "{}", "model.safetensors": "z"})
	noRef := hfRepo(t, cache, "org/no-ref", "", c3, map[string]string{"config.json": "{}", "model.safetensors": "x"})
	// GGUF repos (no config.json): one quant, or two (each a model); a
	// pull request ref.
	oneGGUF := hfRepo(t, cache, "org/one-GGUF", "main", c1, map[string]string{"m-Q4_K_M.gguf": "g", "README.md": "r"})
	twoGGUF := hfRepo(t, cache, "org/two-GGUF", "v2", c2, map[string]string{"m-Q4_K_M.gguf": "g", "m-Q8_0.gguf": "h"})
	pr := hfRepo(t, cache, "org/one-GGUF", "pr/1", c3, map[string]string{"m-Q4_K_M.gguf": "i"})
	hfRepo(t, cache, "org/readme-only", "main", c1, map[string]string{"README.md": "r"})
	// A dangling link (its blob removed): not complete.
	dangling := hfRepo(t, cache, "org/dangling", "main", c1, map[string]string{"config.json": "{}", "model.safetensors": "x"})
	target, _ := os.Readlink(filepath.Join(dangling, "model.safetensors"))
	if err := os.Remove(filepath.Join(dangling, target)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cache, "datasets--org--data"), 0o755); err != nil {
		t.Fatal(err)
	}

	got := DiscoverHFCache(cache)
	want := []Entry{
		{Name: "org/no-ref@" + c3, Path: noRef, Kind: KindSafetensors},
		{Name: "org/one-GGUF", Path: filepath.Join(oneGGUF, "m-Q4_K_M.gguf"), Kind: KindGGUF},
		{Name: "org/one-GGUF@pr/1", Path: filepath.Join(pr, "m-Q4_K_M.gguf"), Kind: KindGGUF},
		{Name: "org/sharded", Path: whole, Kind: KindSafetensors},
		{Name: "org/single", Path: single, Kind: KindSafetensors},
		{Name: "org/single@v1", Path: tagged, Kind: KindSafetensors},
		{Name: "org/two-GGUF/m-Q4_K_M@v2", Path: filepath.Join(twoGGUF, "m-Q4_K_M.gguf"), Kind: KindGGUF},
		{Name: "org/two-GGUF/m-Q8_0@v2", Path: filepath.Join(twoGGUF, "m-Q8_0.gguf"), Kind: KindGGUF},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DiscoverHFCache = %+v, want %+v", got, want)
	}
	if DiscoverHFCache("") != nil || DiscoverHFCache(filepath.Join(cache, "nowhere")) != nil {
		t.Error("no cache lists something")
	}

	for _, tc := range []struct {
		repo, rev, dir, commit string
	}{
		{"org/single", "", single, c1},
		{"org/single", "main", single, c1},
		{"org/single", "v1", tagged, c2},
		{"org/single", c2, tagged, c2},
		{"org/no-ref", c3, filepath.Join(cache, "models--org--no-ref", "snapshots", c3), c3},
		{"org/no-ref", "main", "", ""},
		{"org/single", "v2", "", ""},
		{"org/single", "../../x", "", ""},
		{"org/one-GGUF", "", oneGGUF, c1},
		{"org/one-GGUF", "pr/1", pr, c3},
		{"org/two-GGUF", "v2", twoGGUF, c2},
		{"org/two-GGUF", "", "", ""},
		{"org/readme-only", "", "", ""},
		{"org/missing-shard", "", "", ""},
		{"org/dangling", "", "", ""},
		{"nobody/nothing", "", "", ""},
		{"bad", "", "", ""},
	} {
		dir, commit, ok := HFSnapshot(cache, tc.repo, tc.rev)
		if dir != tc.dir || commit != tc.commit || ok != (tc.dir != "") {
			t.Errorf("HFSnapshot(%s, %q) = %q %q %v, want %q %q", tc.repo, tc.rev, dir, commit, ok, tc.dir, tc.commit)
		}
		// HFEntries names the snapshot's models as the discovery does.
		entries, commit, ok := HFEntries(cache, tc.repo, tc.rev)
		if ok != (tc.dir != "") || commit != tc.commit && ok {
			t.Errorf("HFEntries(%s, %q) = %v %q %v", tc.repo, tc.rev, entries, commit, ok)
		}
		for _, e := range entries {
			if !slices.Contains(got, e) {
				t.Errorf("HFEntries(%s, %q): %+v is not listed", tc.repo, tc.rev, e)
			}
		}
	}
}

func TestHFCacheDir(t *testing.T) {
	home, _ := os.UserHomeDir()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HF_HUB_CACHE": "/a", "HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, "/a"},
		{map[string]string{"HUGGINGFACE_HUB_CACHE": "/l", "HF_HOME": "/b"}, "/l"},
		{map[string]string{"HF_HOME": "/b", "XDG_CACHE_HOME": "/c"}, "/b/hub"},
		{map[string]string{"XDG_CACHE_HOME": "/c"}, "/c/huggingface/hub"},
		{map[string]string{}, filepath.Join(home, ".cache", "huggingface", "hub")},
	} {
		if got := HFCacheDir(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("HFCacheDir(%v) = %q, want %q", tc.env, got, tc.want)
		}
	}
}
