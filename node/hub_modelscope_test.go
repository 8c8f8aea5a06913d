package node_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/hub"
	"fusion/internal/mstest"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestHubModelScope: source=modelscope on the admin routes of a 3-node
// cluster, against the ModelScope stand-in: search; a download asked of
// a to run on c (c's job in b's list, the model on c); allow_patterns;
// cancelled at half and resumed without fetching the bytes twice; a
// private repo's 401 in the job's error; a disk too full refused before
// a byte; an unknown source a 400.
func TestHubModelScope(t *testing.T) {
	srv := mstest.Start(t)
	const repo = "demo-org/demo-model"
	src := demoSource(t)
	srv.AddModel(t, repo, src)
	weights := repo + "/model.safetensors"
	st, _ := os.Stat(filepath.Join(src, "model.safetensors"))
	size := st.Size()
	a, b, c := startTrio(t, func(id string, o *nodetest.Options) {
		o.HF = node.HFConfig{ModelScopeEndpoint: srv.URL, MinFreeDisk: 1}
		if id == "b" { // b's disk is full: 1 MiB over the 1 GiB to keep
			o.HF.MinFreeDisk = 1 << 30
			o.HF.FreeBytes = func(string) (int64, error) { return 1<<30 + 1<<20, nil }
		}
	})

	t.Run("search", func(t *testing.T) {
		code, out := adminDo(t, b, http.MethodGet, "/admin/api/hf/models?source=modelscope&q=demo&sort=downloads", "")
		data, _ := out["data"].([]any)
		if code != 200 || len(data) != 1 || data[0].(map[string]any)["id"] != repo {
			t.Fatalf("%d %v", code, out)
		}
	})

	t.Run("a download asked of a, run on c", func(t *testing.T) {
		j := startDownload(t, a, `{"source":"modelscope","repo":"`+repo+`","node":"c","allow_patterns":["*.json","*.safetensors"]}`)
		if j.Node != "c" {
			t.Fatalf("job %+v, want it on c", j)
		}
		done := waitJob(t, b, j.ID, final)
		if done.State != jobs.Done || done.Node != "c" || done.Progress.Done != done.Progress.Total || done.Progress.Total < size {
			t.Fatalf("b sees %+v", done)
		}
		var res hub.Result
		if err := json.Unmarshal(done.Result, &res); err != nil || res.Model != "demo-model" || res.Commit != mstest.Branch {
			t.Errorf("result %s (%v)", done.Result, err)
		}
		sameFile(t, filepath.Join(c.ModelsDir(), "demo-model", "model.safetensors"), filepath.Join(src, "model.safetensors"))
		if !slices.ContainsFunc(done.Log, func(l string) bool { return strings.Contains(l, srv.URL) }) {
			t.Errorf("the log does not name ModelScope's endpoint: %v", done.Log)
		}
	})

	t.Run("allow_patterns: one GGUF file", func(t *testing.T) {
		j := waitJob(t, a, startDownload(t, a, `{"source":"modelscope","repo":"`+repo+`","allow_patterns":["*q8_0.gguf"]}`).ID, final)
		if j.State != jobs.Done {
			t.Fatalf("job %+v", j)
		}
		sameFile(t, filepath.Join(a.ModelsDir(), "demo-q8_0.gguf"), filepath.Join(src, "demo-q8_0.gguf"))
	})

	t.Run("cancelled at half, resumed", func(t *testing.T) {
		srv.Throttle(2 << 20)
		defer srv.Throttle(0)
		before := srv.Fetched(weights)
		body := `{"source":"modelscope","repo":"` + repo + `","name":"resumed","allow_patterns":["*.json","model.safetensors"]}`
		j := startDownload(t, a, body)
		waitJob(t, a, j.ID, func(j jobs.Job) bool { return j.Progress.Percent >= 50 || final(j) })
		code, out := adminDo(t, a, http.MethodDelete, "/admin/api/jobs/"+j.ID, "")
		if got := decodeJob(t, out); code != 200 || got.State != jobs.Cancelled {
			t.Fatalf("cancel: %d %v", code, out)
		}
		first := srv.Fetched(weights) - before
		if first <= 0 || first >= size {
			t.Fatalf("fetched %d of %d before the cancel", first, size)
		}
		srv.Throttle(0)
		done := waitJob(t, a, startDownload(t, a, body).ID, final)
		if done.State != jobs.Done {
			t.Fatalf("resumed job %+v", done)
		}
		all := srv.Fetched(weights) - before
		t.Logf("%d-byte file: %d bytes before the cancel, %d in all", size, first, all)
		if all > size+hub.ChunkSize {
			t.Errorf("fetched %d bytes for a %d-byte file across the cancel (one chunk is %d)", all, size, hub.ChunkSize)
		}
		sameFile(t, filepath.Join(a.ModelsDir(), "resumed", "model.safetensors"), filepath.Join(src, "model.safetensors"))
	})

	t.Run("a private repo without a token: 401 in the job's error", func(t *testing.T) {
		const private = "demo-org/private"
		srv.AddModel(t, private, src)
		srv.Private(private, "tok")
		j := waitJob(t, a, startDownload(t, a, `{"source":"modelscope","repo":"`+private+`"}`).ID, final)
		if j.State != jobs.Failed || !strings.Contains(j.Error, "401 Unauthorized") || !strings.Contains(j.Error, "private") || !strings.Contains(j.Error, "MODELSCOPE_API_TOKEN") {
			t.Errorf("job %+v", j)
		}
	})

	t.Run("not enough disk space: refused before a byte", func(t *testing.T) {
		before := srv.Fetched(weights)
		j := waitJob(t, b, startDownload(t, b, `{"source":"modelscope","repo":"`+repo+`"}`).ID, final)
		if j.State != jobs.Failed || !strings.Contains(j.Error, "not enough disk space") {
			t.Errorf("job %+v", j)
		}
		if got := srv.Fetched(weights) - before; got != 0 {
			t.Errorf("%d bytes fetched", got)
		}
	})

	t.Run("an unknown source", func(t *testing.T) {
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/admin/api/hf/download", `{"source":"ftp","repo":"a/b"}`},
			{"GET", "/admin/api/hf/models?source=ftp", ``},
		} {
			code, out := adminDo(t, a, tc.method, tc.path, tc.body)
			if e, _ := out["error"].(map[string]any); code != 400 || e == nil || e["param"] != "source" {
				t.Errorf("%s %s %s: %d %v", tc.method, tc.path, tc.body, code, out)
			}
		}
	})
}
