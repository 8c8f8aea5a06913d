package hub_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/hub"
	"fusion/internal/mstest"
)

// TestFetchModelScope runs the download cases against the ModelScope
// stand-in, which the official modelscope client downloads from byte for
// byte (one Python run).
func TestFetchModelScope(t *testing.T) {
	srv := mstest.Start(t)
	src := demoRepo(t)
	const repo = "demo-org/demo-model"
	srv.AddModel(t, repo, src)
	weights := repo + "/model.safetensors"
	st, err := os.Stat(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	size := st.Size()
	client := hub.New(hub.Options{Source: hub.SourceModelScope, Endpoint: srv.URL})
	ctx := context.Background()
	all := []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "demo-q8_0.gguf", "demo-q4_0.gguf"}

	t.Run("full download, byte for byte as the modelscope client gets it", func(t *testing.T) {
		models := t.TempDir()
		res, err := hub.Fetch(ctx, client, hub.Request{Repo: repo}, hub.FetchOptions{ModelsDir: models})
		if err != nil {
			t.Fatal(err)
		}
		if res.Model != "demo-model" || res.Files != 7 || res.Resumed != 0 || res.Commit != "master" {
			t.Errorf("result %+v", res)
		}
		sameFiles(t, filepath.Join(models, "demo-model"), src, all...)
		if got := names(t, filepath.Join(models, hub.DownloadsDir)); len(got) != 0 {
			t.Errorf("staging left behind: %v", got)
		}
		// The official client, in one run: the same bytes from the stand-in,
		// and a private repo without a token refused with a 401.
		official := t.TempDir()
		srv.AddModel(t, "demo-org/private-model", src)
		srv.Private("demo-org/private-model", "secret")
		refused := srv.MSDownload(t, repo, official, "demo-org/private-model")
		sameFiles(t, official, src, all...)
		// E3001 is the client's code for an authentication error.
		if got := refused["demo-org/private-model"]; !strings.Contains(got, "[E3001] [401]") {
			t.Errorf("the modelscope client on a private repo without a token: %q, want its 401 authentication error", got)
		}
		reqs := srv.Requests()
		for _, want := range []string{"GET /api/v1/models/demo-org/demo-model/repo/files?Recursive=True&Revision=master",
			"GET /api/v1/models/demo-org/demo-model/repo?Revision=master&FilePath=model.safetensors"} {
			if !slices.ContainsFunc(reqs, func(r string) bool { return sameQuery(r, want) }) {
				t.Errorf("no request %q among %q", want, reqs)
			}
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
		if _, err := hub.Fetch(ctx, client, hub.Request{Repo: repo, Revision: "v9"}, hub.FetchOptions{ModelsDir: t.TempDir()}); !errors.Is(err, hub.ErrNotFound) {
			t.Errorf("an unknown revision: %v", err)
		}
	})

	t.Run("stopped at half, resumed from what is on disk", func(t *testing.T) {
		models := t.TempDir()
		srv.Throttle(4 << 20)
		defer srv.Throttle(0)
		before := srv.Fetched(weights)
		stop, atHalf := stopAtHalf(ctx)
		_, err := hub.Fetch(stop, client, hub.Request{Repo: repo, Allow: []string{"*.safetensors", "*.json"}}, hub.FetchOptions{ModelsDir: models, Progress: atHalf})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped download: %v", err)
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
		total := srv.Fetched(weights) - before
		t.Logf("weights %d bytes: %d fetched before the stop, %d in all, %d on disk at the restart", size, first, total, res.Resumed)
		if total > size+hub.ChunkSize {
			t.Errorf("fetched %d bytes of a %d-byte file across the stop: more than one chunk (%d) twice", total, size, hub.ChunkSize)
		}
		if res.Resumed == 0 || !slices.ContainsFunc(srv.Requests(), func(r string) bool {
			return strings.Contains(r, "FilePath=model.safetensors") && strings.Contains(r, "Range: bytes=")
		}) {
			t.Error("the second attempt did not resume with a Range request")
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

	t.Run("a private repo without its token", func(t *testing.T) {
		const private = "demo-org/private-model" // added by the first case
		_, err := hub.Fetch(ctx, client, hub.Request{Repo: private}, hub.FetchOptions{ModelsDir: t.TempDir()})
		if !errors.Is(err, hub.ErrUnauthorized) {
			t.Fatalf("err %v, want 401", err)
		}
		for _, want := range []string{"401", "demo-org/private-model@master is private", "MODELSCOPE_API_TOKEN"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		wrong := hub.New(hub.Options{Source: hub.SourceModelScope, Endpoint: srv.URL, Token: "wrong"})
		if _, err := hub.Fetch(ctx, wrong, hub.Request{Repo: private}, hub.FetchOptions{ModelsDir: t.TempDir()}); !errors.Is(err, hub.ErrUnauthorized) || !strings.Contains(err.Error(), "not accepted") {
			t.Errorf("a wrong token: %v", err)
		}
		models := t.TempDir()
		good := hub.New(hub.Options{Source: hub.SourceModelScope, Endpoint: srv.URL, Token: "secret"})
		if _, err := hub.Fetch(ctx, good, hub.Request{Repo: private, Allow: []string{"*.json"}}, hub.FetchOptions{ModelsDir: models}); err != nil {
			t.Fatalf("with the token: %v", err)
		}
		sameFiles(t, filepath.Join(models, "private-model"), src, "config.json")
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
	})

	t.Run("search", func(t *testing.T) {
		ms, err := client.Search(ctx, hub.SearchOptions{Search: "demo", Author: "demo-org", Sort: "downloads", Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || ms[0].ID != repo || ms[0].Author != "demo-org" || ms[0].Downloads != 7 || ms[0].PipelineTag != "text-generation" {
			t.Errorf("models %+v (the private one must not show)", ms)
		}
	})
}

// sameQuery compares two logged requests ignoring the order of their
// query parameters.
func sameQuery(a, b string) bool {
	pa, qa, _ := strings.Cut(a, "?")
	pb, qb, _ := strings.Cut(b, "?")
	sa, sb := strings.Split(qa, "&"), strings.Split(qb, "&")
	slices.Sort(sa)
	slices.Sort(sb)
	return pa == pb && slices.Equal(sa, sb)
}
