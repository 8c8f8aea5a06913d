package hub_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// stopAtHalf is a context cancelled once the Progress callback it
// returns sees half of the bytes on disk.
func stopAtHalf(ctx context.Context) (context.Context, func(done, total int64)) {
	stop, cancel := context.WithCancel(ctx)
	var once sync.Once
	return stop, func(done, total int64) {
		if done >= total/2 {
			once.Do(cancel)
		}
	}
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

	t.Run("revisions: a branch and a commit", func(t *testing.T) {
		commit := srv.Branch(t, repo, "slim", "demo-q4_0.gguf")
		plan, err := hub.Plan(ctx, client, hub.Request{Repo: repo, Revision: "slim"}, "")
		if err != nil || plan.Commit != commit || plan.Files != 6 || plan.Model != "demo-model" {
			t.Fatalf("plan of the branch: %+v %v", plan, err)
		}
		for _, rev := range []string{"slim", commit} {
			models := t.TempDir()
			res, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Revision: rev}, hub.FetchOptions{ModelsDir: models})
			if err != nil {
				t.Fatalf("%s: %v", rev, err)
			}
			if res.Commit != commit || res.Files != 6 {
				t.Errorf("%s: result %+v", rev, res)
			}
			if _, err := os.Stat(filepath.Join(models, "demo-model", "demo-q4_0.gguf")); !os.IsNotExist(err) {
				t.Errorf("%s: the file the branch removed is there (%v)", rev, err)
			}
			sameFiles(t, filepath.Join(models, "demo-model"), src, "model.safetensors", "demo-q8_0.gguf", "config.json")
		}
		if _, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Revision: "no-such-branch"}, hub.FetchOptions{ModelsDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "@no-such-branch was not found") {
			t.Errorf("an unknown revision: %v", err)
		}
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
		stop, atHalf := stopAtHalf(ctx)
		_, err := hub.Fetch(stop, client, hub.Request{Repo: repo, Allow: []string{"*.safetensors", "*.json"}}, hub.FetchOptions{ModelsDir: models, Progress: atHalf})
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

	// A gated repo, its LFS files Xet-backed: their resolve answers 302
	// to the CAS bridge (another origin, a signed URL) with X-Xet-Hash and
	// X-Linked-*. The token is sent, and must stay with the Hub.
	const gated = "demo-org/gated-model"
	srv.AddModel(t, gated, src)
	srv.Gate(gated, "secret")
	srv.Xet(gated)

	t.Run("a gated repo without its token", func(t *testing.T) {
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

	const xetRepo = gated
	xetWeights := xetRepo + "/model.safetensors"
	xetClient := hub.New(hub.Options{Endpoint: srv.URL, Token: "secret"})
	xetAllow := []string{"*.safetensors", "*.json"}
	const minPart = 1 << 20 // the demo weights are a few MiB: cut in parts
	bridgeGets := func(from int) (ranged []string) {
		for _, r := range srv.Requests()[from:] {
			if rest, ok := strings.CutPrefix(r, "BRIDGE GET "+xetWeights+" "); ok {
				ranged = append(ranged, rest)
			}
		}
		return ranged
	}

	t.Run("xet: redirected to the CAS bridge, in ranged parts, without the token", func(t *testing.T) {
		models := t.TempDir()
		before, from := srv.Fetched(xetWeights), len(srv.Requests())
		res, err := hub.Fetch(ctx, xetClient, hub.Request{Repo: xetRepo, Allow: xetAllow}, hub.FetchOptions{ModelsDir: models, Parts: 4, MinPart: minPart})
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, filepath.Join(models, "gated-model"), src, "model.safetensors", "config.json", "tokenizer.json")
		if res.Files != 5 {
			t.Errorf("result %+v", res)
		}
		gets := bridgeGets(from)
		t.Logf("weights %d bytes from the bridge as %q", size, gets)
		if len(gets) != int(min(4, size/minPart)) || slices.Contains(gets, "") {
			t.Errorf("the bridge got %q, want %d ranged parts", gets, min(4, size/minPart))
		}
		if got := srv.Fetched(xetWeights) - before; got != size {
			t.Errorf("the bridge sent %d bytes of %d", got, size)
		}
		if got := srv.BridgeAuth(); len(got) != 0 {
			t.Errorf("the token went to the bridge: %q", got)
		}
		if _, err := hub.Fetch(ctx, hub.New(hub.Options{Endpoint: srv.URL}), hub.Request{Repo: xetRepo, Allow: xetAllow}, hub.FetchOptions{ModelsDir: t.TempDir()}); !errors.Is(err, hub.ErrUnauthorized) {
			t.Errorf("without the token: %v", err)
		}
	})

	t.Run("xet: the official client (HF_HUB_DISABLE_XET=1) gets the same bytes", func(t *testing.T) {
		official := t.TempDir()
		from := len(srv.Requests())
		srv.HFDownloadToken(t, "secret", xetRepo, official, "*.safetensors", "config.json")
		sameFiles(t, official, src, "model.safetensors", "config.json")
		if gets := bridgeGets(from); !slices.Equal(gets, []string{""}) {
			t.Errorf("huggingface_hub's requests to the bridge: %q, want one whole GET", gets)
		}
		if got := srv.BridgeAuth(); len(got) != 0 {
			t.Errorf("huggingface_hub sent the token to the bridge: %q", got)
		}
	})

	t.Run("xet: stopped at half, the parts resumed at the bridge", func(t *testing.T) {
		models := t.TempDir()
		srv.Throttle(1 << 20)
		defer srv.Throttle(0)
		before := srv.Fetched(xetWeights)
		stop, atHalf := stopAtHalf(ctx)
		o := hub.FetchOptions{ModelsDir: models, Parts: 4, MinPart: minPart, Progress: atHalf}
		if _, err := hub.Fetch(stop, xetClient, hub.Request{Repo: xetRepo, Allow: xetAllow}, o); !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped download: %v", err)
		}
		first := srv.Fetched(xetWeights) - before
		if first <= 0 || first >= size {
			t.Fatalf("the first attempt fetched %d of %d bytes: not stopped part way", first, size)
		}
		srv.Throttle(0)
		from := len(srv.Requests())
		o.Progress = nil
		res, err := hub.Fetch(ctx, xetClient, hub.Request{Repo: xetRepo, Allow: xetAllow}, o)
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, filepath.Join(models, "gated-model"), src, "model.safetensors")
		all := srv.Fetched(xetWeights) - before
		gets := bridgeGets(from)
		t.Logf("weights %d bytes: %d before the stop, %d in all, %d on disk at the restart; resumed as %q", size, first, all, res.Resumed, gets)
		if all > size+4*hub.ChunkSize {
			t.Errorf("fetched %d bytes of a %d-byte file across the stop: more than one chunk a part (%d) twice", all, size, hub.ChunkSize)
		}
		if res.Resumed == 0 || len(gets) == 0 {
			t.Errorf("the second attempt did not resume: %d bytes on disk, ranges %q", res.Resumed, gets)
		}
		if got := names(t, filepath.Join(models, hub.DownloadsDir)); len(got) != 0 {
			t.Errorf("staging left behind: %v", got)
		}
		if got := srv.BridgeAuth(); len(got) != 0 {
			t.Errorf("the token went to the bridge: %q", got)
		}
	})

	t.Run("xet: a corrupted part is detected and the file fetched again", func(t *testing.T) {
		models := t.TempDir()
		before := srv.Fetched(xetWeights)
		srv.CorruptNext(xetWeights)
		if _, err := hub.Fetch(ctx, xetClient, hub.Request{Repo: xetRepo, Allow: []string{"model.safetensors", "config.json"}}, hub.FetchOptions{ModelsDir: models, Parts: 4, MinPart: minPart}); err != nil {
			t.Fatal(err)
		}
		sameFiles(t, filepath.Join(models, "gated-model"), src, "model.safetensors")
		if got := srv.Fetched(xetWeights) - before; got != 2*size {
			t.Errorf("fetched %d bytes, want twice %d", got, size)
		}
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

// TestDownloadParts: a file located behind a redirect to another origin
// on the same host (Go's own redirect rule would keep the token there) is
// fetched without the token, in ranged parts, resumed part by part from
// the progress kept beside it, and in one stream from a server that
// ignores Range.
func TestDownloadParts(t *testing.T) {
	content := make([]byte, 1<<20+123)
	for i := range content {
		content[i] = byte(i*7 + i>>9)
	}
	h := sha256.Sum256(content)
	sum := hex.EncodeToString(h[:])
	f := hub.File{Path: "w.safetensors", Size: int64(len(content)), SHA256: sum}
	var mu sync.Mutex
	var ranges, cdnAuth, hubAuth []string
	ignoreRange := false
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ranges = append(ranges, r.Header.Get("Range"))
		cdnAuth = append(cdnAuth, r.Header.Get("Authorization"))
		ignore := ignoreRange
		mu.Unlock()
		if ignore {
			_, _ = w.Write(content)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(content))
	}))
	defer cdn.Close()
	hubSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hubAuth = append(hubAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(content)))
		w.Header().Set("X-Xet-Hash", strings.Repeat("a", 64))
		http.Redirect(w, r, cdn.URL+"/xet-bridge/x?sig=1", http.StatusFound)
	}))
	defer hubSrv.Close()
	c := hub.New(hub.Options{Endpoint: hubSrv.URL, Token: "tok"})
	split := hub.Split{Parts: 4, MinPart: 64 << 10}
	quarter := int64(len(content)) / 4
	for _, tc := range []struct {
		name       string
		staged     []int64 // bytes of each part already on disk (nil: nothing)
		ignore     bool
		wantRanges []string
	}{
		// 1048699 bytes: parts at k*size/4.
		{"four parts", nil, false, []string{"bytes=0-262173", "bytes=262174-524348", "bytes=524349-786523", "bytes=786524-1048698"}},
		{"resumed", []int64{quarter, 1000, 0, quarter + 1}, false, []string{"bytes=263174-524348", "bytes=524349-786523"}},
		// One or more parts answered 200 (the others are cancelled, maybe
		// before they are sent), then one whole GET: checked below.
		{"a server ignoring Range", nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			ranges, cdnAuth, hubAuth, ignoreRange = nil, nil, nil, tc.ignore
			mu.Unlock()
			dst := filepath.Join(t.TempDir(), "w.incomplete")
			if tc.staged != nil {
				out, err := os.Create(dst)
				if err != nil {
					t.Fatal(err)
				}
				rec := make([]byte, 8*len(tc.staged))
				for k, n := range tc.staged {
					start := int64(len(content)) * int64(k) / 4
					if _, err := out.WriteAt(content[start:start+n], start); err != nil {
						t.Fatal(err)
					}
					binary.LittleEndian.PutUint64(rec[8*k:], uint64(n))
				}
				out.Close()
				if err := os.WriteFile(dst+".parts", rec, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var last int64
			err := c.DownloadFileSplit(context.Background(), "o/r", "main", f, dst, split, func(n int64) { last = n })
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(dst)
			if !bytes.Equal(got, content) || last != int64(len(content)) {
				t.Errorf("file %d bytes (equal %v), progress ended at %d", len(got), bytes.Equal(got, content), last)
			}
			if _, err := os.Stat(dst + ".parts"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the parts' progress is left: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(ranges)
			if tc.ignore {
				parts := []string{"bytes=0-262173", "bytes=262174-524348", "bytes=524349-786523", "bytes=786524-1048698"}
				if len(ranges) < 2 || ranges[0] != "" || slices.ContainsFunc(ranges[1:], func(r string) bool { return !slices.Contains(parts, r) }) {
					t.Errorf("ranges %q, want some of the parts then one whole GET", ranges)
				}
			} else if !slices.Equal(ranges, tc.wantRanges) {
				t.Errorf("ranges %q, want %q", ranges, tc.wantRanges)
			}
			for _, a := range cdnAuth {
				if a != "" {
					t.Errorf("the other origin got Authorization %q", a)
				}
			}
			if len(hubAuth) != 1 || hubAuth[0] != "Bearer tok" {
				t.Errorf("the Hub got %q", hubAuth)
			}
		})
	}
}
