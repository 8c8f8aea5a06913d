package node_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/engine/demo"
	"fusion/engine/demo/demotest"
	"fusion/hub"
	"fusion/internal/hubtest"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
)

// demoSource writes a demo model (a few MB, so a throttled download can
// be caught half way) with a GGUF quant of it beside it, and returns the
// directory.
func demoSource(t *testing.T) string {
	t.Helper()
	// Both models are built once per test binary (demotest).
	dir := filepath.Join(t.TempDir(), "src")
	demotest.Create(t, dir, demo.Options{Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Layers: 4, Seed: 5})
	g := filepath.Join(t.TempDir(), "q")
	demotest.Create(t, g, demo.Options{Format: demo.FormatGGUF, GGUFType: "q8_0", Seed: 5})
	b, err := os.ReadFile(demo.GGUFPath(g))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "demo-q8_0.gguf"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hubRepo commits demoSource to the Hub as repo and returns the source
// directory.
func hubRepo(t *testing.T, srv *hubtest.Server, repo string) string {
	t.Helper()
	dir := demoSource(t)
	srv.AddModel(t, repo, dir)
	return dir
}

func decodeJob(t *testing.T, m map[string]any) jobs.Job {
	t.Helper()
	b, _ := json.Marshal(m)
	var j jobs.Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// startDownload posts a download to n and returns its job.
func startDownload(t *testing.T, n *node.Node, body string) jobs.Job {
	t.Helper()
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/hf/download", body)
	if code != http.StatusAccepted {
		t.Fatalf("download %s: %d %v", body, code, out)
	}
	return decodeJob(t, out)
}

// waitJob polls n's record of job id until ok says so.
func waitJob(t *testing.T, n *node.Node, id string, ok func(jobs.Job) bool) jobs.Job {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // generous: a loaded machine runs jobs slowly
	for {
		code, out := adminDo(t, n, http.MethodGet, "/admin/api/jobs/"+id, "")
		if code == http.StatusOK {
			if j := decodeJob(t, out); ok(j) {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %d %v", id, code, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func final(j jobs.Job) bool { return jobs.Final(j.State) }

// followJob reads the job's event stream to its end and returns the
// records it carried.
func followJob(t *testing.T, n *node.Node, id string) []jobs.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/admin/api/jobs/"+id, nil)
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var out []jobs.Job
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "job":
			var j jobs.Job
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &j); err != nil {
				t.Fatal(err)
			}
			out = append(out, j)
		case strings.HasPrefix(line, "data: ") && event == "done":
			return out
		}
	}
	t.Fatalf("the stream ended without its done event (%v); %d records", sc.Err(), len(out))
	return nil
}

func modelIDs(t *testing.T, n *node.Node) map[string][]string {
	t.Helper()
	code, out := adminDo(t, n, http.MethodGet, "/admin/api/models", "")
	if code != 200 {
		t.Fatalf("models: %d %v", code, out)
	}
	ids := map[string][]string{}
	for _, m := range out["data"].([]any) {
		m := m.(map[string]any)
		var nodes []string
		for _, x := range m["nodes"].([]any) {
			nodes = append(nodes, x.(string))
		}
		ids[m["id"].(string)] = nodes
	}
	return ids
}

func sameFile(t *testing.T, got, want string) {
	t.Helper()
	a, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// TestHubDownloads: downloads through the admin API of one node, against
// olah serving a demo model repo: the job's progress over SSE to done and
// the model served; allow_patterns; a download cancelled half way and
// resumed without fetching its bytes twice; a stop (interrupted) and a
// restart that resumes; a gated repo's 401 in the job's error; a disk
// too full refused before a byte; the route's 400s.
func TestHubDownloads(t *testing.T) {
	srv := hubtest.Start(t)
	const repo = "demo-org/demo-model"
	src := hubRepo(t, srv, repo)
	weights := repo + "/model.safetensors"
	st, _ := os.Stat(filepath.Join(src, "model.safetensors"))
	size := st.Size()
	models, data := nodetest.Models(t), t.TempDir()
	opts := nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data, HF: node.HFConfig{Endpoint: srv.URL, MinFreeDisk: 1}}
	n := nodetest.Start(t, opts)

	t.Run("download, progress over SSE, the model served", func(t *testing.T) {
		// About a second for the weights: several of the stream's polls
		// (admin.JobStreamPoll) see the job part-way.
		srv.Throttle(max(size, 256<<10))
		defer srv.Throttle(0)
		j := startDownload(t, n, `{"repo":"`+repo+`","allow_patterns":["*.json","*.safetensors"]}`)
		if j.Kind != "download" || j.State != jobs.Running || j.Node == "" {
			t.Fatalf("job %+v", j)
		}
		recs := followJob(t, n, j.ID)
		last := recs[len(recs)-1]
		if last.State != jobs.Done || last.Progress.Unit != "bytes" || last.Progress.Done != last.Progress.Total || last.Progress.Total < size {
			t.Fatalf("last record %+v", last)
		}
		if !slices.ContainsFunc(recs[:len(recs)-1], func(r jobs.Job) bool {
			return r.State == jobs.Running && r.Progress.Done > 0 && r.Progress.Done < r.Progress.Total
		}) {
			t.Errorf("no progress event part-way before the end: %+v", recs)
		}
		var res hub.Result
		if err := json.Unmarshal(last.Result, &res); err != nil || res.Model != "demo-model" {
			t.Errorf("result %s (%v)", last.Result, err)
		}
		sameFile(t, filepath.Join(models, "demo-model", "model.safetensors"), filepath.Join(src, "model.safetensors"))
		if _, ok := modelIDs(t, n)["demo-model"]; !ok {
			t.Fatal("the downloaded model is not in /admin/api/models")
		}
		code, out := adminDo(t, n, http.MethodPost, "/v1/chat/completions", `{"model":"demo-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		if code != 200 {
			t.Errorf("chat with the downloaded model: %d %v", code, out)
		}
		code, list := adminDo(t, n, http.MethodGet, "/admin/api/jobs?kind=download&state=done", "")
		if code != 200 || !slices.ContainsFunc(list["data"].([]any), func(x any) bool { return x.(map[string]any)["id"] == j.ID }) {
			t.Errorf("job list: %d %v", code, list)
		}
		code, out = adminDo(t, n, http.MethodPost, "/admin/api/hf/download", `{"repo":"`+repo+`"}`)
		if code != http.StatusAccepted {
			t.Fatalf("again: %d %v", code, out)
		}
		again := waitJob(t, n, decodeJob(t, out).ID, final)
		if again.State != jobs.Failed || !strings.Contains(again.Error, "already in the models directory") {
			t.Errorf("a second download of the same model: %+v", again)
		}
	})

	t.Run("allow_patterns: one GGUF file", func(t *testing.T) {
		j := waitJob(t, n, startDownload(t, n, `{"repo":"`+repo+`","allow_patterns":["*q8_0.gguf"]}`).ID, final)
		if j.State != jobs.Done {
			t.Fatalf("job %+v", j)
		}
		sameFile(t, filepath.Join(models, "demo-q8_0.gguf"), filepath.Join(src, "demo-q8_0.gguf"))
		if _, ok := modelIDs(t, n)["demo-q8_0"]; !ok {
			t.Error("the GGUF model is not listed")
		}
	})

	t.Run("cancelled at half, resumed", func(t *testing.T) {
		srv.Throttle(2 << 20)
		defer srv.Throttle(0)
		before := srv.Fetched(weights)
		body := `{"repo":"` + repo + `","name":"resumed","allow_patterns":["*.json","model.safetensors"]}`
		j := startDownload(t, n, body)
		waitJob(t, n, j.ID, func(j jobs.Job) bool { return j.Progress.Percent >= 50 || final(j) })
		code, out := adminDo(t, n, http.MethodDelete, "/admin/api/jobs/"+j.ID, "")
		if c := decodeJob(t, out); code != 200 || c.State != jobs.Cancelled {
			t.Fatalf("cancel: %d %v", code, out)
		}
		first := srv.Fetched(weights) - before
		if first <= 0 || first >= size {
			t.Fatalf("fetched %d of %d before the cancel", first, size)
		}
		srv.Throttle(0)
		done := waitJob(t, n, startDownload(t, n, body).ID, final)
		if done.State != jobs.Done {
			t.Fatalf("resumed job %+v", done)
		}
		all := srv.Fetched(weights) - before
		t.Logf("%d-byte file: %d bytes before the cancel, %d in all", size, first, all)
		if all > size+hub.ChunkSize {
			t.Errorf("fetched %d bytes for a %d-byte file across the cancel (one chunk is %d)", all, size, hub.ChunkSize)
		}
		sameFile(t, filepath.Join(models, "resumed", "model.safetensors"), filepath.Join(src, "model.safetensors"))
		if code, out := adminDo(t, n, http.MethodDelete, "/admin/api/jobs/"+j.ID, ""); code != 200 || out["deleted"] != true {
			t.Errorf("deleting a finished job: %d %v", code, out)
		}
		if code, _ := adminDo(t, n, http.MethodGet, "/admin/api/jobs/"+j.ID, ""); code != 404 {
			t.Errorf("deleted job: %d", code)
		}
	})

	t.Run("a node stopped mid-download: interrupted, then resumed on its own", func(t *testing.T) {
		srv.Throttle(2 << 20)
		defer srv.Throttle(0)
		before := srv.Fetched(weights)
		body := `{"repo":"` + repo + `","name":"restarted","allow_patterns":["*.json","model.safetensors"]}`
		m := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: t.TempDir(), HF: opts.HF})
		j := startDownload(t, m, body)
		waitJob(t, m, j.ID, func(j jobs.Job) bool { return j.Progress.Percent >= 40 || final(j) })
		if err := m.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The same data dir: the record says the job was interrupted, and
		// the node starts it again on its own.
		srv.Throttle(0)
		hf := opts.HF
		hf.Resumes = 1
		m2 := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: dataDirOf(t, m), HF: hf})
		if got := waitJob(t, m2, j.ID, final); got.State != jobs.Interrupted {
			t.Fatalf("after the restart: %+v", got)
		}
		var again jobs.Job
		eventually(t, "a job resuming "+j.ID, func() string {
			for _, x := range jobList(t, m2) {
				x := decodeJob(t, x.(map[string]any))
				var p struct {
					Resumes     string `json:"resumes"`
					ResumeCount int    `json:"resume_count"`
				}
				if json.Unmarshal(x.Params, &p) == nil && p.Resumes == j.ID && p.ResumeCount == 1 {
					again = x
					return ""
				}
			}
			return "none"
		})
		done := waitJob(t, m2, again.ID, final)
		var res hub.Result
		_ = json.Unmarshal(done.Result, &res)
		if done.State != jobs.Done || res.Resumed == 0 || !strings.Contains(strings.Join(done.Log, "\n"), "resuming "+j.ID) {
			t.Fatalf("resumed after the restart: %+v", done)
		}
		if all := srv.Fetched(weights) - before; all > size+hub.ChunkSize {
			t.Errorf("fetched %d bytes for a %d-byte file across the restart", all, size)
		}
	})

	t.Run("more jobs than --max-jobs: 429", func(t *testing.T) {
		srv.Throttle(64 << 10)
		defer srv.Throttle(0)
		o := opts
		o.ModelsDir, o.DataDir, o.MaxJobs = t.TempDir(), t.TempDir(), 1
		m := nodetest.Start(t, o)
		j := startDownload(t, m, `{"repo":"`+repo+`","allow_patterns":["model.safetensors"]}`)
		code, out := adminDo(t, m, http.MethodPost, "/admin/api/hf/download", `{"repo":"`+repo+`","name":"second"}`)
		e, _ := out["error"].(map[string]any)
		if code != http.StatusTooManyRequests || e == nil || e["code"] != "too_many_jobs" || !strings.Contains(fmt.Sprint(e["message"]), "1 at once") {
			t.Errorf("a second job at max-jobs 1: %d %v", code, out)
		}
		if code, out := adminDo(t, m, http.MethodDelete, "/admin/api/jobs/"+j.ID, ""); code != 200 {
			t.Errorf("cancel: %d %v", code, out)
		}
		waitJob(t, m, j.ID, final)
		// Its slot is free again.
		j = startDownload(t, m, `{"repo":"`+repo+`","name":"third","allow_patterns":["config.json"]}`)
		if got := waitJob(t, m, j.ID, final); got.State != jobs.Done {
			t.Errorf("after the cancel: %+v", got)
		}
	})

	t.Run("a gated repo without a token: 401 in the job's error", func(t *testing.T) {
		const gated = "demo-org/gated"
		srv.AddModel(t, gated, src)
		srv.Gate(gated, "tok")
		j := waitJob(t, n, startDownload(t, n, `{"repo":"`+gated+`"}`).ID, final)
		if j.State != jobs.Failed || !strings.Contains(j.Error, "401 Unauthorized") || !strings.Contains(j.Error, "gated") || !strings.Contains(j.Error, "HF_TOKEN") {
			t.Errorf("job %+v", j)
		}
	})

	t.Run("not enough disk space: refused before a byte", func(t *testing.T) {
		before := srv.Fetched(weights)
		// 1 GiB and 1 MiB free, 1 GiB to keep (--min-free-disk): the few
		// MB do not fit.
		dir := t.TempDir()
		full := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: dir, HF: node.HFConfig{Endpoint: srv.URL, MinFreeDisk: 1 << 30,
			FreeBytes: func(string) (int64, error) { return 1<<30 + 1<<20, nil }}})
		j := waitJob(t, full, startDownload(t, full, `{"repo":"`+repo+`"}`).ID, final)
		if j.State != jobs.Failed || !strings.Contains(j.Error, "not enough disk space") || !strings.Contains(j.Error, "must stay free") {
			t.Errorf("job %+v", j)
		}
		if _, err := os.Stat(filepath.Join(dir, "demo-model")); err == nil {
			t.Error("the model dir was created")
		}
		if got := srv.Fetched(weights) - before; got != 0 {
			t.Errorf("%d bytes fetched", got)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			method, path, body string
			code               int
			param              string
		}{
			{"POST", "/admin/api/hf/download", `{}`, 400, "repo"},
			{"POST", "/admin/api/hf/download", `{"repo":"../x"}`, 400, "repo"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","allow_patterns":[""]}`, 400, "allow_patterns[0]"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","allow_patterns":"x"}`, 400, "allow_patterns"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","name":".hidden"}`, 400, "name"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","colour":1}`, 400, "colour"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","node":"nope"}`, 404, "node"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","placement":{}}`, 400, "placement"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","placement":{"stages":17}}`, 400, "placement.stages"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","placement":{"replicas":-1}}`, 400, "placement.replicas"},
			{"POST", "/admin/api/hf/download", `{"repo":"a/b","placement":{"pin":["x","x"]}}`, 400, "placement.pin[1]"},
			{"GET", "/admin/api/jobs/nope", ``, 404, "id"},
			{"DELETE", "/admin/api/jobs/nope", ``, 404, "id"},
			{"GET", "/admin/api/hf/models?limit=0", ``, 400, "limit"},
			{"GET", "/admin/api/hf/models?sort=size", ``, 400, "sort"},
		} {
			code, out := adminDo(t, n, tc.method, tc.path, tc.body)
			e, _ := out["error"].(map[string]any)
			if code != tc.code || e == nil || e["param"] != tc.param {
				t.Errorf("%s %s %s: %d %v", tc.method, tc.path, tc.body, code, out)
			}
		}
	})
}

// dataDirOf is the data dir a node was started with.
func dataDirOf(t *testing.T, n *node.Node) string {
	t.Helper()
	return n.DataDir()
}

// TestHubSearch: /admin/api/hf/models asks the Hub's /api/models (olah's
// offline mirror has none, so this Hub is a test server answering what
// the Hub documents) and answers its models; a Hub that fails is a 502.
func TestHubSearch(t *testing.T) {
	var query string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		if r.URL.Query().Get("search") == "boom" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, `[{"id":"mlx-community/Qwen3-0.6B-4bit","downloads":7,"likes":1,"library_name":"mlx"}]`)
	}))
	defer ts.Close()
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", HF: node.HFConfig{Endpoint: ts.URL}})
	code, out := adminDo(t, n, http.MethodGet, "/admin/api/hf/models?q=qwen3&library=mlx&sort=downloads&limit=5", "")
	data, _ := out["data"].([]any)
	if code != 200 || len(data) != 1 || data[0].(map[string]any)["id"] != "mlx-community/Qwen3-0.6B-4bit" {
		t.Fatalf("%d %v", code, out)
	}
	if query != "direction=-1&library=mlx&limit=5&search=qwen3&sort=downloads" {
		t.Errorf("the Hub was asked %q", query)
	}
	if code, out := adminDo(t, n, http.MethodGet, "/admin/api/hf/models?search=boom", ""); code != 502 || out["error"].(map[string]any)["code"] != "hub_error" {
		t.Errorf("a failing Hub: %d %v", code, out)
	}
	if code, _ := adminDo(t, n, http.MethodGet, "/admin/api/hf/models?source=ftp", ""); code != 400 {
		t.Errorf("an unknown source: %d, want 400", code)
	}
}

// TestHubDownloadsCluster: a download asked of node b to run on node c is
// c's job in a's list, its model lands in c's models dir and shows in
// the cluster's model list on c; a's DELETE of a job running on c
// cancels it on c.
func TestHubDownloadsCluster(t *testing.T) {
	srv := hubtest.Start(t)
	const repo = "demo-org/demo-model"
	src := hubRepo(t, srv, repo)
	a, b, c := startTrio(t, func(id string, o *nodetest.Options) { o.HF = node.HFConfig{Endpoint: srv.URL, MinFreeDisk: 1} })
	j := startDownload(t, b, `{"repo":"`+repo+`","node":"c","allow_patterns":["*.json","*.safetensors"]}`)
	if j.Node != "c" {
		t.Fatalf("job %+v, want it on c", j)
	}
	done := waitJob(t, a, j.ID, final)
	if done.State != jobs.Done || done.Node != "c" {
		t.Fatalf("a sees %+v", done)
	}
	code, list := adminDo(t, a, http.MethodGet, "/admin/api/jobs", "")
	if code != 200 || !slices.ContainsFunc(list["data"].([]any), func(x any) bool { return x.(map[string]any)["id"] == j.ID }) {
		t.Errorf("a's job list: %d %v", code, list)
	}
	sameFile(t, filepath.Join(c.ModelsDir(), "demo-model", "model.safetensors"), filepath.Join(src, "model.safetensors"))
	if nodes := modelIDs(t, a)["demo-model"]; !slices.Equal(nodes, []string{"c"}) {
		t.Errorf("a lists demo-model on %v, want [c]", nodes)
	}

	srv.Throttle(1 << 20)
	defer srv.Throttle(0)
	j = startDownload(t, a, `{"repo":"`+repo+`","node":"c","name":"slow","allow_patterns":["*.json","*.safetensors"]}`)
	waitJob(t, b, j.ID, func(j jobs.Job) bool { return j.Progress.Done > 0 || final(j) })
	code, out := adminDo(t, a, http.MethodDelete, "/admin/api/jobs/"+j.ID, "")
	if got := decodeJob(t, out); code != 200 || got.State != jobs.Cancelled || got.Node != "c" {
		t.Fatalf("a cancels c's job: %d %v", code, out)
	}
	if got := waitJob(t, b, j.ID, final); got.State != jobs.Cancelled {
		t.Errorf("b sees %+v", got)
	}

	// A job c's previous process left running (it was killed: nothing
	// recorded its end), written through a's member: c's start marks it
	// interrupted for every node.
	left := &pb.Job{Id: "job-left", Kind: "download", Node: "c", State: jobs.Running,
		CreatedUnixNano: time.Now().Add(-time.Minute).UnixNano(), UpdatedUnixNano: time.Now().Add(-time.Minute).UnixNano()}
	if _, err := a.Cluster().Apply(context.Background(), &pb.JobPut{Job: left}); err != nil {
		t.Fatal(err)
	}
	if err := c.Jobs().Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := waitJob(t, a, "job-left", final); got.State != jobs.Interrupted || !strings.Contains(got.Error, "restarted") {
		t.Errorf("a sees the left job as %+v", got)
	}
}
