package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/hub"
	"fusion/internal/hubtest"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestHFCache: a Hugging Face cache filled by the official huggingface_hub
// client (snapshot_download, cache_dir) from the test Hub: its complete
// snapshot is listed as ORG/NAME and served; an incomplete one (its
// weights link gone) is not; a download of the cached repo answers from
// the cache without asking the Hub anything, unless forced.
func TestHFCache(t *testing.T) {
	srv := hubtest.Start(t)
	const repo = "demo-org/demo-model"
	src := hubRepo(t, srv, repo)
	cache := t.TempDir()
	// One more repo: its branch q8 (a commit without the safetensors)
	// pulled with allow_patterns, a snapshot of one .gguf and no
	// config.json; and its main commit pulled pinned (no ref names that
	// snapshot). All by the official client, in one run.
	const other = "demo-org/other"
	pinned := srv.AddModel(t, other, src)
	branch := srv.Branch(t, other, "q8", "model.safetensors")
	srv.HFCacheDownloads(t, cache, hubtest.Download{Repo: repo, Allow: []string{"*.json", "*.safetensors"}},
		hubtest.Download{Repo: other, Revision: "q8", Allow: []string{"*.gguf"}},
		hubtest.Download{Repo: other, Revision: pinned, Allow: []string{"*.json", "*.safetensors"}})
	ggufName, pinnedName := other+"@q8", other+"@"+pinned
	snap := cachedSnapshot(t, cache, repo)
	sameFile(t, filepath.Join(snap, "model.safetensors"), filepath.Join(src, "model.safetensors"))
	// An incomplete snapshot: the same repo under another name, its
	// weights link missing (an interrupted snapshot_download).
	partial := filepath.Join(cache, "models--demo-org--partial")
	copyLinks(t, filepath.Join(cache, "models--demo-org--demo-model"), partial)
	if err := os.Remove(filepath.Join(partial, "snapshots", filepath.Base(snap), "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	before := readOnlyTree(t, cache)

	models := nodetest.Models(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: t.TempDir(), HFCache: cache,
		HF: node.HFConfig{Endpoint: srv.URL, MinFreeDisk: 1}})

	t.Run("listed and served", func(t *testing.T) {
		ids := modelIDs(t, n)
		if _, ok := ids[repo]; !ok {
			t.Fatalf("%s not listed: %v", repo, ids)
		}
		if _, ok := ids["demo-org/partial"]; ok {
			t.Error("an incomplete snapshot is listed")
		}
		if _, ok := ids["demo"]; !ok {
			t.Errorf("the models dir's own model is not listed beside it: %v", ids)
		}
		if code, out := adminDo(t, n, http.MethodGet, "/v1/models/"+repo, ""); code != 200 || out["id"] != repo {
			t.Errorf("GET /v1/models/%s: %d %v", repo, code, out)
		}
		if code, out := adminDo(t, n, http.MethodPost, "/admin/api/models/"+url.PathEscape(repo)+"/unload", ""); code != 200 {
			t.Errorf("unload %s: %d %v", repo, code, out)
		}
		code, out := adminDo(t, n, http.MethodPost, "/v1/chat/completions", `{"model":"`+repo+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		if code != 200 {
			t.Fatalf("chat with the cached model: %d %v", code, out)
		}
	})

	t.Run("a GGUF snapshot and revisions other than main: listed, served, pulled from the cache", func(t *testing.T) {
		ids := modelIDs(t, n)
		for _, id := range []string{ggufName, pinnedName} {
			if _, ok := ids[id]; !ok {
				t.Errorf("%s not listed: %v", id, ids)
			}
		}
		if _, ok := ids[other]; ok {
			t.Errorf("%s listed under main, which the cache does not have", other)
		}
		code, out := adminDo(t, n, http.MethodPost, "/v1/chat/completions", `{"model":"`+ggufName+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		if code != 200 {
			t.Fatalf("chat with the cached GGUF: %d %v", code, out)
		}
		b, err := os.ReadFile(filepath.Join(cache, "models--demo-org--other", "refs", "q8"))
		if err != nil || strings.TrimSpace(string(b)) != branch {
			t.Fatalf("huggingface_hub's refs/q8: %q %v, want %s", b, err, branch)
		}
		gguf := filepath.Join(cache, "models--demo-org--other", "snapshots", branch, "demo-q8_0.gguf")
		asked := len(srv.Requests())
		for _, tc := range []struct {
			body, model, path string
		}{
			{`{"repo":"` + other + `","revision":"q8","allow_patterns":["*q8_0.gguf"]}`, ggufName, gguf},
			{`{"repo":"` + other + `","revision":"` + pinned + `"}`, pinnedName, filepath.Join(cache, "models--demo-org--other", "snapshots", pinned)},
		} {
			j := waitJob(t, n, startDownload(t, n, tc.body).ID, final)
			var res hub.Result
			if err := json.Unmarshal(j.Result, &res); j.State != jobs.Done || err != nil {
				t.Fatalf("job %+v", j)
			}
			if !res.FromCache || res.Model != tc.model || !slices.Equal(res.Paths, []string{tc.path}) {
				t.Errorf("%s: result %s, want from_cache %s at %s", tc.body, j.Result, tc.model, tc.path)
			}
		}
		if got := srv.Requests()[asked:]; len(got) != 0 {
			t.Errorf("the Hub was asked %v", got)
		}
	})

	t.Run("a download of the cached repo fetches nothing", func(t *testing.T) {
		asked := len(srv.Requests())
		j := waitJob(t, n, startDownload(t, n, `{"repo":"`+repo+`"}`).ID, final)
		if j.State != jobs.Done {
			t.Fatalf("job %+v", j)
		}
		var res hub.Result
		if err := json.Unmarshal(j.Result, &res); err != nil {
			t.Fatal(err)
		}
		if !res.FromCache || res.Model != repo || len(res.Paths) != 1 || res.Paths[0] != snap || res.Commit != filepath.Base(snap) {
			t.Errorf("result %s, want from_cache at %s", j.Result, snap)
		}
		if got := srv.Requests()[asked:]; len(got) != 0 {
			t.Errorf("the Hub was asked %v", got)
		}
		if _, err := os.Stat(filepath.Join(models, "demo-model")); err == nil {
			t.Error("the cached model was copied into the models dir")
		}
	})

	t.Run("force downloads", func(t *testing.T) {
		asked := len(srv.Requests())
		j := waitJob(t, n, startDownload(t, n, `{"repo":"`+repo+`","force":true,"allow_patterns":["*.json","*.safetensors"]}`).ID, final)
		if j.State != jobs.Done || strings.Contains(string(j.Result), "from_cache") {
			t.Fatalf("job %+v", j)
		}
		fetched := 0
		for _, r := range srv.Requests()[asked:] {
			if strings.Contains(r, "/resolve/") {
				fetched++
			}
		}
		if fetched == 0 {
			t.Error("a forced download fetched no file")
		}
		sameFile(t, filepath.Join(models, "demo-model", "model.safetensors"), filepath.Join(src, "model.safetensors"))
	})

	if after := readOnlyTree(t, cache); after != before {
		t.Errorf("the HF cache changed:\nbefore %s\nafter  %s", before, after)
	}
}

// cachedSnapshot is the snapshot dir refs/main of repo names in cache.
func cachedSnapshot(t *testing.T, cache, repo string) string {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	b, err := os.ReadFile(filepath.Join(root, "refs", "main"))
	if err != nil {
		t.Fatalf("huggingface_hub's cache layout: %v", err)
	}
	snap := filepath.Join(root, "snapshots", strings.TrimSpace(string(b)))
	if st, err := os.Lstat(filepath.Join(snap, "model.safetensors")); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the snapshot's weights are not a link into blobs/: %v %v", st, err)
	}
	return snap
}

// readOnlyTree lists dir's entries with their sizes and times, to see
// that nothing wrote into it.
func readOnlyTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + fi.ModTime().String() + ";")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// copyLinks copies the tree src to dst, links as links (huggingface_hub's
// relative links into blobs/ stay valid).
func copyLinks(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(to, 0o755)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHFCacheCluster: a model only in node a's Hugging Face cache is in
// every node's cluster model list as ORG/NAME, on a alone; a chat asked
// of c runs (forwarded to a), and an unload aimed at a through c finds it
// by its escaped name; the same for its revision v1, ORG/NAME@v1.
func TestHFCacheCluster(t *testing.T) {
	const repo, commit = "demo-org/cached", "0123456789abcdef0123456789abcdef01234567"
	cache := t.TempDir()
	addCachedSnapshot(t, cache, repo, "main", commit)
	// A second snapshot only refs/v1 names: the model demo-org/cached@v1.
	const v1 = "89abcdef0123456789abcdef0123456789abcdef"
	addCachedSnapshot(t, cache, repo, "v1", v1)
	_, _, c := startTrio(t, func(id string, o *nodetest.Options) {
		if id == "a" {
			o.HFCache = cache
		}
	})
	eventually(t, "the cached model in c's cluster list", func() string {
		_, list := adminDo(t, c, http.MethodGet, "/admin/api/models", "")
		if m := modelEntry(t, list, repo); m == nil || !slices.Equal(strs(m["nodes"]), []string{"a"}) {
			return fmt.Sprint(list)
		}
		return ""
	})
	if code, out := chatText(t, c, repo, "hi", ""); code != 200 {
		t.Fatalf("chat on c with a's cached model: %d %s", code, out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/models/"+url.PathEscape(repo)+"/unload", `{"node":"a"}`); code != 200 {
		t.Errorf("unload on a through c: %d %v", code, out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/models/"+url.PathEscape(repo)+"/load", ""); code != 200 {
		t.Errorf("load through c (run on a, the node holding it): %d %v", code, out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/models/"+url.PathEscape(repo)+"/unload", ""); code != 200 {
		t.Errorf("cluster-wide unload through c: %d %v", code, out)
	}
	// The revision's name travels the same way.
	const tagged = repo + "@v1"
	_, list := adminDo(t, c, http.MethodGet, "/admin/api/models", "")
	if m := modelEntry(t, list, tagged); m == nil || !slices.Equal(strs(m["nodes"]), []string{"a"}) {
		t.Fatalf("%s not in c's cluster list on a: %v", tagged, list)
	}
	if code, out := chatText(t, c, tagged, "hi", ""); code != 200 {
		t.Fatalf("chat on c with a's %s: %d %s", tagged, code, out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/models/"+url.PathEscape(tagged)+"/unload", `{"node":"a"}`); code != 200 {
		t.Errorf("unload of %s on a through c: %d %v", tagged, code, out)
	}
}

// addCachedSnapshot puts the demo model into the Hugging Face cache dir
// as repo's snapshot commit, named by refs/ref, in huggingface_hub's
// layout: each file a blob under blobs/, the snapshot's entries relative
// links to them.
func addCachedSnapshot(t *testing.T, cache, repo, ref, commit string) {
	t.Helper()
	root := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	src := filepath.Join(nodetest.Models(t), nodetest.Model)
	snap := filepath.Join(root, "snapshots", commit)
	for _, d := range []string{filepath.Join(root, "blobs"), filepath.Join(root, "refs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		blob := commit[:8] + "-" + e.Name() // a stand-in for the file's hash
		if err := os.WriteFile(filepath.Join(root, "blobs", blob), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "refs", ref), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
}
