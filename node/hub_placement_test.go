package node_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/cluster"
	"fusion/internal/hubtest"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
	"fusion/router/admin"
)

// TestHubDownloadsPlacement: a download for a placement, asked on a,
// fetches the model to the nodes the placement takes (c and b, pinned) as
// one job on a waiting for a download job on each, and then stores the
// placement: the planner shards the model over c and b, and a serves it.
// Asked again for three whole replicas, only a fetches (b and c have it).
// Cancelling a placement's job cancels its downloads and stores nothing.
// A placement the cluster cannot take is a 409, before any job.
func TestHubDownloadsPlacement(t *testing.T) {
	srv := hubtest.Start(t)
	const repo = "demo-org/demo-model"
	src := hubRepo(t, srv, repo)
	a, b, c := startTrio(t, func(id string, o *nodetest.Options) { o.HF = node.HFConfig{Endpoint: srv.URL, MinFreeDisk: 1} })
	nodes := map[string]*node.Node{"a": a, "b": b, "c": c}
	allow := `"allow_patterns":["*.json","*.safetensors"]`
	st, err := os.Stat(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}

	// The catalog of nodes is in the Raft state: every node sees all
	// three usable first.
	for _, n := range nodes {
		waitUntil(t, 30*time.Second, "three usable nodes in "+n.Cluster().ID()+"'s catalog", func() bool {
			_, err := n.Cluster().DownloadNodes("x", cluster.PlacementSpec{Replicas: 3}, 0)
			return err == nil
		})
	}
	j := startDownload(t, a, `{"repo":"`+repo+`",`+allow+`,"placement":{"stages":2,"pin":["c","b"]}}`)
	if j.Node != "a" || j.Kind != "download" {
		t.Fatalf("job %+v, want a download on a", j)
	}
	done := waitJob(t, b, j.ID, final)
	if done.State != jobs.Done {
		t.Fatalf("placement job: %+v", done)
	}
	var res admin.PlacementResult
	if err := json.Unmarshal(done.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Model != "demo-model" || res.Stages != 2 || !slices.Equal(res.Nodes, []string{"c", "b"}) || len(res.Have) != 0 ||
		len(res.Downloads) != 2 || res.Bytes < st.Size() {
		t.Fatalf("result %+v", res)
	}
	if done.Progress.Total != 2*res.Bytes || done.Progress.Done != done.Progress.Total {
		t.Errorf("progress %+v, want %d of %d bytes", done.Progress, 2*res.Bytes, 2*res.Bytes)
	}
	for _, id := range []string{"c", "b"} {
		d := waitJob(t, a, res.Downloads[id], final)
		if d.State != jobs.Done || d.Node != id {
			t.Errorf("%s's download: %+v", id, d)
		}
		sameFile(t, filepath.Join(nodes[id].ModelsDir(), "demo-model", "model.safetensors"), filepath.Join(src, "model.safetensors"))
	}
	if _, err := os.Stat(filepath.Join(a.ModelsDir(), "demo-model")); !os.IsNotExist(err) {
		t.Errorf("a has the model: %v", err)
	}
	spec, ok := c.Cluster().PlacementSpecOf("demo-model")
	if !ok || spec.Replicas != 1 || spec.Stages != 2 || !slices.Equal(spec.Pin, []string{"c", "b"}) {
		t.Fatalf("placement %+v %v", spec, ok)
	}
	// The planner shards it over c and b, and a forwards to the pipeline.
	waitUntil(t, 60*time.Second, "demo-model ready in a pipeline on c and b", func() bool {
		_, doc := clusterDoc(t, a.URL(), "k")
		for _, p := range doc.Placements {
			if p.Model == "demo-model" && p.State == "ready" && len(p.Stages) == 2 && p.Stages[0].Node == "c" && p.Stages[1].Node == "b" {
				return true
			}
		}
		return false
	})
	var text string
	waitUntil(t, 30*time.Second, "an answer from a", func() bool {
		code, out := chatText(t, a, "demo-model", "hi", `,"temperature":0`)
		if code != 200 && code != http.StatusServiceUnavailable {
			t.Fatalf("chat on a: %d %s", code, out)
		}
		text = out
		return code == 200 && out != ""
	})
	t.Logf("a answers %q through the pipeline", text)

	// Three whole replicas: b and c have it, only a fetches.
	j = startDownload(t, b, `{"repo":"`+repo+`",`+allow+`,"placement":{"replicas":3}}`)
	done = waitJob(t, c, j.ID, final)
	res = admin.PlacementResult{}
	if err := json.Unmarshal(done.Result, &res); done.State != jobs.Done || err != nil {
		t.Fatalf("placement job: %+v %v", done, err)
	}
	have := slices.Sorted(slices.Values(res.Have))
	if res.Stages != 1 || len(res.Nodes) != 3 || res.Nodes[2] != "a" || !slices.Equal(have, []string{"b", "c"}) ||
		len(res.Downloads) != 1 || res.Downloads["a"] == "" {
		t.Fatalf("result %+v", res)
	}
	sameFile(t, filepath.Join(a.ModelsDir(), "demo-model", "model.safetensors"), filepath.Join(src, "model.safetensors"))
	if spec, _ := a.Cluster().PlacementSpecOf("demo-model"); spec.Replicas != 3 || spec.Stages != 0 || !slices.Equal(spec.Pin, res.Nodes) {
		t.Errorf("placement %+v", spec)
	}

	// Refused before any job: more nodes than the cluster has, and
	// files that make two models.
	before := len(jobList(t, a))
	for _, tc := range []struct {
		body, code string
		status     int
	}{
		{`{"repo":"` + repo + `",` + allow + `,"placement":{"replicas":4}}`, "placement_unfit", 409},
		{`{"repo":"` + repo + `",` + allow + `,"placement":{"replicas":2,"stages":2}}`, "placement_unfit", 409},
		{`{"repo":"` + repo + `","allow_patterns":["nothing*"],"placement":{}}`, "invalid_value", 400},
		{`{"repo":"` + repo + `","placement":{"replicas":1,"colour":1}}`, "", 400},
	} {
		code, out := adminDo(t, c, http.MethodPost, "/admin/api/hf/download", tc.body)
		e, _ := out["error"].(map[string]any)
		if code != tc.status || e == nil || tc.code != "" && e["code"] != tc.code {
			t.Errorf("%s: %d %v", tc.body, code, out)
		}
	}
	if n := len(jobList(t, a)); n != before {
		t.Errorf("%d jobs after the refusals, %d before", n, before)
	}

	// Cancelled half way: its downloads are cancelled, nothing placed.
	srv.Throttle(1 << 20)
	defer srv.Throttle(0)
	j = startDownload(t, a, `{"repo":"`+repo+`",`+allow+`,"name":"slow","placement":{"replicas":2,"pin":["b","c"]}}`)
	waitJob(t, a, j.ID, func(j jobs.Job) bool { return j.Progress.Done > 0 || final(j) })
	code, out := adminDo(t, c, http.MethodDelete, "/admin/api/jobs/"+j.ID, "")
	if got := decodeJob(t, out); code != 200 || got.State != jobs.Cancelled {
		t.Fatalf("c cancels a's placement job: %d %v", code, out)
	}
	var downloads []string
	for _, l := range waitJob(t, b, j.ID, final).Log {
		_, l, _ = strings.Cut(l, " ") // the time
		if node, id, ok := strings.Cut(l, ": download "); ok {
			downloads = append(downloads, node)
			if d := waitJob(t, b, id, final); d.State != jobs.Cancelled || d.Node != node {
				t.Errorf("%s's download %s: %+v", node, id, d)
			}
		}
	}
	if !slices.Equal(downloads, []string{"b", "c"}) {
		t.Errorf("downloads started on %v, want b and c", downloads)
	}
	if _, ok := a.Cluster().PlacementSpecOf("slow"); ok {
		t.Error("a placement was stored for the cancelled download")
	}
}

// jobList is n's job list.
func jobList(t *testing.T, n *node.Node) []any {
	t.Helper()
	code, out := adminDo(t, n, http.MethodGet, "/admin/api/jobs", "")
	if code != 200 {
		t.Fatalf("jobs: %d %v", code, out)
	}
	return out["data"].([]any)
}
