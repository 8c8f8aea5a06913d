package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"fusion/node"
	"fusion/node/nodetest"
)

// num reads a number at a dotted path of a JSON answer (-1 if absent).
func num(v any, path string) float64 {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return -1
		}
		v = m[k]
	}
	f, ok := v.(float64)
	if !ok {
		return -1
	}
	return f
}

// nodeStats is one node's figures of GET /admin/api/stats on n.
func nodeStats(t *testing.T, n *node.Node, id string) map[string]any {
	t.Helper()
	code, out := adminDo(t, n, http.MethodGet, "/admin/api/stats", "")
	if code != 200 {
		t.Fatalf("stats: %d %v", code, out)
	}
	if id == "total" {
		return out["total"].(map[string]any)
	}
	ns, _ := out["nodes"].(map[string]any)[id].(map[string]any)
	return ns
}

// TestAdminStatsOneNode: the stats count generations (requests, tokens,
// failures by status, per model, latency and TTFT percentiles, memory,
// prefix cache), clear resets the session counters only, all-time
// counters survive a restart, and clear-alltime resets them for good.
func TestAdminStatsOneNode(t *testing.T) {
	data, models := t.TempDir(), nodetest.Models(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data, Cluster: node.ClusterConfig{NodeID: "solo"}})
	for i := 0; i < 2; i++ {
		if code, _ := chatText(t, n, "demo", "count me", `,"temperature":0`); code != 200 {
			t.Fatalf("chat: %d", code)
		}
	}
	if code, _ := chatText(t, n, "nope", "count me", ""); code != 404 {
		t.Fatalf("unknown model: %d", code)
	}
	s := nodeStats(t, n, "solo")
	for path, want := range map[string]float64{
		"session.requests": 3, "session.successful_requests": 2, "session.failed_requests": 1, "session.failed_by_status.404": 1,
		"session.models.demo.requests": 2, "alltime.requests": 3, "latency_seconds.samples": 2, "ttft_seconds.samples": 2,
	} {
		if got := num(s, path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	for _, path := range []string{"session.tokens_in", "session.tokens_out", "latency_seconds.p50", "latency_seconds.p99", "memory.ram_total", "memory.weights", "rates.decode_tokens_per_second_1m"} {
		if got := num(s, path); got <= 0 {
			t.Errorf("%s = %v, want > 0", path, got)
		}
	}
	if got := num(s, "prefix_cache.misses"); got < 0 {
		t.Errorf("prefix cache figures missing: %v", s["prefix_cache"])
	}

	if code, out := adminDo(t, n, http.MethodPost, "/admin/api/stats/clear", ""); code != 200 || out["status"] != "ok" {
		t.Fatalf("clear: %d %v", code, out)
	}
	s = nodeStats(t, n, "solo")
	if num(s, "session.requests") != 0 || num(s, "alltime.requests") != 3 || num(s, "latency_seconds.samples") != 0 {
		t.Errorf("after clear: session %v, alltime %v", s["session"], s["alltime"])
	}

	restart := func() {
		t.Helper()
		if err := n.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		n = nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data, Cluster: node.ClusterConfig{NodeID: "solo"}})
	}
	restart()
	s = nodeStats(t, n, "solo")
	if num(s, "alltime.requests") != 3 || num(s, "alltime.models.demo.tokens_out") <= 0 || num(s, "session.requests") != 0 {
		t.Errorf("after a restart: session %v, alltime %v", s["session"], s["alltime"])
	}
	if code, _ := adminDo(t, n, http.MethodPost, "/admin/api/stats/clear-alltime", ""); code != 200 {
		t.Fatalf("clear-alltime: %d", code)
	}
	restart()
	if s = nodeStats(t, n, "solo"); num(s, "alltime.requests") != 0 {
		t.Errorf("all-time after clear-alltime and a restart: %v", s["alltime"])
	}
}

// TestAdminStatsCluster: any node reports every node's figures and their
// total, and clears every node's session counters.
func TestAdminStatsCluster(t *testing.T) {
	a, b, c := startTrio(t, nil)
	for _, n := range []*node.Node{b, b, c} {
		if code, _ := chatText(t, n, "demo", "count me", `,"temperature":0`); code != 200 {
			t.Fatalf("chat: %d", code)
		}
	}
	code, out := adminDo(t, a, http.MethodGet, "/admin/api/stats", "")
	nodes, _ := out["nodes"].(map[string]any)
	if code != 200 || len(nodes) != 3 {
		t.Fatalf("stats on a: %d %v", code, out)
	}
	// Requests count where their HTTP request came in.
	for id, want := range map[string]float64{"a": 0, "b": 2, "c": 1, "total": 3} {
		if got := num(nodeStats(t, a, id), "session.requests"); got != want {
			t.Errorf("%s: session.requests %v, want %v", id, got, want)
		}
	}
	// The total's percentiles are over the three requests' samples; the
	// samples themselves only travel between nodes.
	tot, nb, nc := nodeStats(t, a, "total"), nodeStats(t, a, "b"), nodeStats(t, a, "c")
	if got := num(tot, "latency_seconds.samples"); got != 3 {
		t.Errorf("total latency samples %v, want 3", got)
	}
	if got, want := num(tot, "latency_seconds.p99"), max(num(nb, "latency_seconds.p99"), num(nc, "latency_seconds.p99")); got != want {
		t.Errorf("total p99 %v, want the slowest request's %v", got, want)
	}
	if _, ok := nb["samples"]; ok {
		t.Errorf("a node's samples in the answer: %v", nb["samples"])
	}
	if got := num(nodeStats(t, c, "total"), "memory.ram_total"); got != 3*num(nodeStats(t, c, "c"), "memory.ram_total") {
		t.Errorf("total RAM %v is not three nodes' (one machine)", got)
	}
	if code, out := adminDo(t, a, http.MethodGet, "/admin/api/stats?node=b", ""); code != 200 || len(out["nodes"].(map[string]any)) != 1 || num(out, "nodes.b.session.requests") != 2 {
		t.Errorf("stats of b alone through a: %d %v", code, out)
	}
	// Each node's last hour (a point from its start) through any node.
	if code, out := adminDo(t, c, http.MethodGet, "/admin/api/stats/history", ""); code != 200 || len(out["nodes"].(map[string]any)) != 3 ||
		num(out, "every_seconds") != 10 || len(out["nodes"].(map[string]any)["a"].([]any)) == 0 {
		t.Errorf("history through c: %d %v", code, out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/stats/clear", ""); code != 200 || len(strs(out["nodes"])) != 3 {
		t.Fatalf("clear through c: %d %v", code, out)
	}
	if got := num(nodeStats(t, a, "total"), "session.requests"); got != 0 {
		t.Errorf("total after a cluster-wide clear: %v", got)
	}
	if got := num(nodeStats(t, a, "total"), "alltime.requests"); got != 3 {
		t.Errorf("all-time total after a session clear: %v", got)
	}
}

// TestAdminGlobalSettings: the effective configuration with sources, the
// key shown as set only, bad changes refused naming the key, a live change
// (log_level) in force on every node, a restart-only one reported as such.
func TestAdminGlobalSettings(t *testing.T) {
	levels := map[string]*slog.LevelVar{}
	a, _, c := startTrio(t, func(id string, o *nodetest.Options) {
		levels[id] = new(slog.LevelVar)
		o.LogLevel = levels[id]
		o.APIKey = "k"
	})
	code, out := adminDo(t, c, http.MethodGet, "/admin/api/global-settings", "")
	if code != 200 {
		t.Fatalf("get: %d %v", code, out)
	}
	setting := func(out map[string]any, key string) map[string]any {
		for _, s := range out["settings"].([]any) {
			if s := s.(map[string]any); s["key"] == key {
				return s
			}
		}
		return nil
	}
	if s := setting(out, "api_key"); s == nil || s["value"] != "set" || s["secret"] != true {
		t.Errorf("api_key: %v", s)
	}
	if s := setting(out, "cluster_secret"); s == nil || s["value"] != "set" {
		t.Errorf("cluster_secret: %v", s)
	}
	if s := setting(out, "max_queued"); s == nil || s["source"] != "config" || s["live"] != false {
		t.Errorf("max_queued: %v", s)
	}
	for _, c := range []struct{ body, param string }{
		{`{"bogus":1}`, "bogus"}, {`{"max_queued":"many"}`, "max_queued"}, {`{"idle_ttl":"soon"}`, "idle_ttl"},
		{`{"log_level":"loud"}`, "log_level"}, {`{"api_key":"x"}`, "api_key"}, {`{"max_queued":[1]}`, "max_queued"},
	} {
		if code, out := adminDo(t, a, http.MethodPost, "/admin/api/global-settings", c.body); code != 400 || errParam(out) != c.param {
			t.Errorf("%s: %d %v", c.body, code, out)
		}
	}
	code, out = adminDo(t, a, http.MethodPost, "/admin/api/global-settings", `{"log_level":"debug","max_queued":7}`)
	if code != 200 || !slices.Equal(strs(out["applied"]), []string{"log_level"}) || !slices.Equal(strs(out["restart_required"]), []string{"max_queued"}) {
		t.Fatalf("post: %d %v", code, out)
	}
	eventually(t, "log_level on every node", func() string {
		for id, l := range levels {
			if l.Level() != slog.LevelDebug {
				return fmt.Sprintf("%s: %v", id, l.Level())
			}
		}
		return ""
	})
	_, out = adminDo(t, c, http.MethodGet, "/admin/api/global-settings", "")
	if s := setting(out, "max_queued"); s["value"] != "7" || s["source"] != "cluster" || s["restart_required"] != true {
		t.Errorf("max_queued on c after the change: %v", s)
	}
	if s := setting(out, "log_level"); s["value"] != "debug" || s["source"] != "cluster" {
		t.Errorf("log_level on c after the change: %v", s)
	}
	raw := fmt.Sprint(out)
	if strings.Contains(raw, `"k"`) || strings.Contains(raw, "value:k ") || strings.Contains(raw, "value:s ") {
		t.Errorf("a secret shows: %s", raw)
	}
}
