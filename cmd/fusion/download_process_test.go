package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"fusion/engine/demo"
	"fusion/hub"
	"fusion/internal/hubtest"
	"fusion/jobs"
)

// TestDownloadProcessKill: a `fusion serve` process downloading a model
// from the Hub (olah, throttled) is killed with SIGKILL half way; started
// again on its data and models dirs, it marks the job interrupted and
// starts the download again on its own (--download-resumes), which ends
// with the file whole, fetching about its size in all (at most two reads
// more: the one lost in the process, and what was in flight).
func TestDownloadProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := hubtest.Start(t)
	const repo = "demo-org/demo-model"
	src := filepath.Join(t.TempDir(), "src")
	if _, err := demo.Create(src, demo.Options{Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Layers: 4, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	srv.AddModel(t, repo, src)
	want, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(want))
	weights := repo + "/model.safetensors"
	dir := t.TempDir()
	port := freePorts(t, 1)[0]
	p := &procNode{id: "solo", http: fmt.Sprintf("http://127.0.0.1:%d", port), log: filepath.Join(dir, "serve.log"), args: []string{
		"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", filepath.Join(dir, "data"), "--api-key", "key",
		"--models-dir", filepath.Join(dir, "models"), "--threads", "1", "--hf-endpoint", srv.URL, "--min-free-disk", "1"}}
	do := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, p.http+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	up := func() {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if code, _ := do(http.MethodGet, "/health", ""); code == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(p.log)
				t.Fatalf("serve is not up: %s", b)
			}
		}
	}
	list := func() []jobs.Job {
		t.Helper()
		code, b := do(http.MethodGet, "/admin/api/jobs", "")
		var out struct{ Data []jobs.Job }
		if code != http.StatusOK || json.Unmarshal(b, &out) != nil {
			t.Fatalf("jobs: %d %s", code, b)
		}
		return out.Data
	}
	waitFor := func(what string, ok func([]jobs.Job) bool) []jobs.Job {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if l := list(); ok(l) {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, list())
			}
		}
	}

	p.start(t)
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	up()
	srv.Throttle(size / 4) // about four seconds
	code, b := do(http.MethodPost, "/admin/api/hf/download", `{"repo":"`+repo+`","allow_patterns":["*.json","model.safetensors"]}`)
	var first jobs.Job
	if code != http.StatusAccepted || json.Unmarshal(b, &first) != nil {
		t.Fatalf("download: %d %s", code, b)
	}
	waitFor("half the bytes", func(l []jobs.Job) bool {
		for _, j := range l {
			if j.ID == first.ID && j.Progress.Total > 0 && j.Progress.Done*2 >= j.Progress.Total {
				return true
			}
		}
		return false
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	killedAt := srv.Fetched(weights)
	if killedAt >= size {
		t.Fatalf("killed after the whole file (%d of %d bytes)", killedAt, size)
	}
	srv.Throttle(0)

	p.start(t)
	up()
	l := waitFor("the download resumed and done", func(l []jobs.Job) bool {
		for _, j := range l {
			if j.State == jobs.Done && strings.Contains(string(j.Params), `"resumes":"`+first.ID+`"`) {
				return true
			}
		}
		return false
	})
	for _, j := range l {
		switch {
		case j.ID == first.ID && (j.State != jobs.Interrupted || !strings.Contains(j.Error, "restarted")):
			t.Errorf("the killed job: %+v", j)
		case j.ID != first.ID:
			var res hub.Result
			if err := json.Unmarshal(j.Result, &res); err != nil || res.Resumed == 0 {
				t.Errorf("the resumed job's result %s: %v", j.Result, err)
			}
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "models", "demo-model", "model.safetensors"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the model's weights differ from the source (%v)", err)
	}
	all := srv.Fetched(weights)
	t.Logf("%d of %d bytes fetched before the kill, %d in all", killedAt, size, all)
	if all > size+2*hub.ChunkSize {
		t.Errorf("fetched %d bytes for a %d-byte file across the kill", all, size)
	}
}
