package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/node"
	"fusion/node/nodetest"
)

// adminDo sends an admin request with key "k" and decodes the JSON answer.
func adminDo(t *testing.T, n *node.Node, method, path, body string) (int, map[string]any) {
	t.Helper()
	return adminDoKey(t, n, "k", method, path, body)
}

// adminDoKey is adminDo with another key.
func adminDoKey(t *testing.T, n *node.Node, key, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, n.URL()+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// errParam is the error's param of an OpenAI-shaped error answer.
func errParam(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	p, _ := e["param"].(string)
	return p
}

// addIncompatible writes two models this engine cannot load into dir (a
// directory from nodetest.Models): the demo model's config.json with an
// unsupported quant_method (ParoQuant's), and with an unsupported
// model_type.
func addIncompatible(t *testing.T, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "demo", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]map[string]any{
		"paro":  {"quantization_config": map[string]any{"quant_method": "paroquant", "bits": 4, "group_size": 128}},
		"mamba": {"architectures": []string{"MambaForCausalLM"}, "model_type": "mamba"},
	} {
		var cfg map[string]any
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		for k, v := range set {
			cfg[k] = v
		}
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(d, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// modelEntry finds id in a model list answer.
func modelEntry(t *testing.T, list map[string]any, id string) map[string]any {
	t.Helper()
	data, _ := list["data"].([]any)
	for _, m := range data {
		if m := m.(map[string]any); m["id"] == id {
			return m
		}
	}
	return nil
}

func strs(v any) []string {
	var out []string
	a, _ := v.([]any)
	for _, x := range a {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// chatText sends a chat request (extra: more JSON fields) and returns the
// status and the answer's text.
func chatText(t *testing.T, n *node.Node, model, content, extra string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":8%s}`, model, content, extra)
	code, out := adminDo(t, n, http.MethodPost, "/v1/chat/completions", body)
	if code != 200 {
		return code, fmt.Sprint(out["error"])
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	return code, fmt.Sprint(ch["message"].(map[string]any)["content"])
}

// eventually retries f until it returns "" or the deadline passes.
func eventually(t *testing.T, what string, f func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// seedThatSamples finds a seed whose sampled answer (temperature 1)
// differs from the greedy one, so a default temperature of 0 shows.
func seedThatSamples(t *testing.T, n *node.Node, greedy string) int {
	t.Helper()
	for seed := 1; seed <= 20; seed++ {
		if _, got := chatText(t, n, "demo", "settings", fmt.Sprintf(`,"seed":%d,"temperature":1`, seed)); got != greedy {
			return seed
		}
	}
	t.Fatal("no seed samples anything but the greedy answer")
	return 0
}

// checkSettingsApplied: on n, a request without temperature is greedy
// (the default temperature 0), the alias "fast" serves demo, and a prompt
// longer than max_context (64) is refused.
func checkSettingsApplied(n *node.Node, seed int, greedy string, t *testing.T) string {
	if _, got := chatText(t, n, "demo", "settings", fmt.Sprintf(`,"seed":%d`, seed)); got != greedy {
		return fmt.Sprintf("default temperature not in force: %q, greedy %q", got, greedy)
	}
	if code, got := chatText(t, n, "fast", "settings", `,"temperature":0`); code != 200 || got != greedy {
		return fmt.Sprintf("alias: %d %q", code, got)
	}
	long := strings.Repeat("many words make a long prompt ", 40)
	if code, msg := chatText(t, n, "demo", long, ""); code != 400 || !strings.Contains(msg, "context is 64") {
		return fmt.Sprintf("max_context: %d %s", code, msg)
	}
	return ""
}

// TestAdminModelSettingsOneNode: a lone node lists its models with their
// details (incompatible ones flagged with the reason), refuses bad
// settings with a 400 naming the key, and applies good ones to its next
// requests without a restart; the settings survive a restart (node.db).
func TestAdminModelSettingsOneNode(t *testing.T) {
	models := nodetest.Models(t)
	addIncompatible(t, models)
	data := t.TempDir()
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data})

	code, list := adminDo(t, n, http.MethodGet, "/admin/api/models", "")
	demo := modelEntry(t, list, "demo")
	// A lone node names itself by its hostname.
	if code != 200 || demo == nil || demo["format"] != "safetensors" || demo["compatible"] != true || demo["backend"] != "cpu" ||
		demo["architecture"] == "" || demo["context_length"].(float64) <= 0 || demo["size"].(float64) <= 0 || len(strs(demo["nodes"])) != 1 {
		t.Fatalf("demo: %d %v", code, demo)
	}
	for id, reason := range map[string]string{"paro": "quant_method", "mamba": "model_type"} {
		m := modelEntry(t, list, id)
		if m == nil || m["compatible"] != false || !strings.Contains(fmt.Sprint(m["reason"]), reason) {
			t.Errorf("%s: %v", id, m)
		}
	}
	if m := modelEntry(t, list, "paro"); m == nil || m["quantization"] != "paroquant" {
		t.Errorf("paro's quantization: %v", m)
	}

	for _, c := range []struct{ body, param string }{
		{`{"bogus":1}`, "bogus"},
		{`{"temperature":5}`, "temperature"},
		{`{"top_p":2}`, "top_p"},
		{`{"max_context":-3}`, "max_context"},
		{`{"ttl_seconds":"x"}`, "ttl_seconds"},
		{`{"tool_parser":"nope"}`, "tool_parser"},
		{`{"alias":"paro"}`, "alias"},
	} {
		code, out := adminDo(t, n, http.MethodPut, "/admin/api/models/demo/settings", c.body)
		if code != 400 || errParam(out) != c.param {
			t.Errorf("%s: %d %v (want 400 naming %s)", c.body, code, out, c.param)
		}
	}
	if code, _ := adminDo(t, n, http.MethodPut, "/admin/api/models/nope/settings", `{"pinned":true}`); code != 404 {
		t.Errorf("settings of an unknown model: %d", code)
	}

	_, greedy := chatText(t, n, "demo", "settings", `,"temperature":0`)
	seed := seedThatSamples(t, n, greedy)
	if msg := checkSettingsApplied(n, seed, greedy, t); msg == "" {
		t.Fatal("the settings are in force before they are set")
	}
	code, out := adminDo(t, n, http.MethodPut, "/admin/api/models/demo/settings", `{"temperature":0,"alias":"fast","max_context":64,"pinned":true}`)
	if code != 200 || out["status"] != "ok" {
		t.Fatalf("put settings: %d %v", code, out)
	}
	if msg := checkSettingsApplied(n, seed, greedy, t); msg != "" {
		t.Fatal(msg)
	}
	_, list = adminDo(t, n, http.MethodGet, "/admin/api/models", "")
	if m := modelEntry(t, list, "demo"); m["pinned"] != true || m["context_length"].(float64) != 64 || m["settings"].(map[string]any)["alias"] != "fast" {
		t.Errorf("listed after the settings: %v", m)
	}

	// A restart keeps them.
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	n = nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: data})
	if msg := checkSettingsApplied(n, seed, greedy, t); msg != "" {
		t.Fatalf("after a restart: %s", msg)
	}
}

// startTrio starts a 3-node cluster a, b, c on loopback, each with the
// demo model (a also with the incompatible ones), and waits until every
// node lists demo on all three.
func startTrio(t *testing.T, opts func(id string, o *nodetest.Options)) (a, b, c *node.Node) {
	t.Helper()
	mk := func(id string, expect int, join []string) *node.Node {
		models := nodetest.Models(t)
		if id == "a" {
			addIncompatible(t, models)
		}
		o := nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: nodetest.Member(id, expect, join)}
		if opts != nil {
			opts(id, &o)
		}
		return nodetest.Start(t, o)
	}
	a = mk("a", 1, nil)
	b = mk("b", 0, []string{a.Cluster().GossipAddr()})
	c = mk("c", 0, []string{a.Cluster().GossipAddr()})
	for _, n := range []*node.Node{a, b, c} {
		eventually(t, "cluster model list on "+n.Cluster().ID(), func() string {
			_, list := adminDo(t, n, http.MethodGet, "/admin/api/models", "")
			if m := modelEntry(t, list, "demo"); m == nil || !slices.Equal(strs(m["nodes"]), []string{"a", "b", "c"}) {
				return fmt.Sprint(list)
			}
			return ""
		})
	}
	return a, b, c
}

// TestAdminModelSettingsCluster: in a 3-node cluster any node lists every
// node's models (with where each is on disk and loaded, and the
// incompatible ones of a); settings written on a are in force on c; a
// load and an unload aimed at one node through another run there.
func TestAdminModelSettingsCluster(t *testing.T) {
	a, b, c := startTrio(t, nil)

	_, list := adminDo(t, b, http.MethodGet, "/admin/api/models", "")
	if m := modelEntry(t, list, "paro"); m == nil || m["compatible"] != false || !slices.Equal(strs(m["nodes"]), []string{"a"}) {
		t.Errorf("a's incompatible model through b: %v", m)
	}

	_, greedy := chatText(t, c, "demo", "settings", `,"temperature":0`)
	seed := seedThatSamples(t, c, greedy)
	if msg := checkSettingsApplied(c, seed, greedy, t); msg == "" {
		t.Fatal("the settings are in force before they are set")
	}
	if code, out := adminDo(t, a, http.MethodPut, "/admin/api/models/demo/settings", `{"temperature":0,"alias":"fast","max_context":64}`); code != 200 {
		t.Fatalf("put settings on a: %d %v", code, out)
	}
	eventually(t, "a's settings in force on c", func() string { return checkSettingsApplied(c, seed, greedy, t) })
	if code, out := adminDo(t, b, http.MethodPut, "/admin/api/models/demo/settings", `{"temperature":9}`); code != 400 || errParam(out) != "temperature" {
		t.Errorf("bad settings through b: %d %v", code, out)
	}

	// Load on b through c; unload on b through a.
	code, out := adminDo(t, c, http.MethodPost, "/admin/api/models/demo/load", `{"node":"b"}`)
	if code != 200 || !slices.Equal(strs(out["nodes"]), []string{"b"}) {
		t.Fatalf("load on b through c: %d %v", code, out)
	}
	_, list = adminDo(t, a, http.MethodGet, "/admin/api/models", "")
	if m := modelEntry(t, list, "demo"); !slices.Contains(strs(m["loaded_on"]), "b") {
		t.Errorf("b's load not listed on a: %v", m)
	}
	if code, out := adminDo(t, a, http.MethodPost, "/admin/api/models/demo/unload?node=b", ""); code != 200 || out["model"].(map[string]any)["state"] != "unloaded" {
		t.Errorf("unload on b through a: %d %v", code, out)
	}
	if code, out := adminDo(t, a, http.MethodPost, "/admin/api/models/demo/load?node=zz", ""); code != 404 || errParam(out) != "node" {
		t.Errorf("an unknown node: %d %v", code, out)
	}
}

// TestAdminCacheCluster: the probe answers for the model on the nodes
// that hold it (each answer naming its node; the loaded one first), or on
// one node with ?node; the clears act on every node, or on one.
func TestAdminCacheCluster(t *testing.T) {
	a, b, c := startTrio(t, nil)
	// b serves a request, so its RAM tier holds the prompt's blocks and
	// the model is loaded there. The model is loaded on b first: left to
	// itself the placement may load it on another node and b would
	// forward the chat there.
	if code, out := adminDo(t, a, http.MethodPost, "/admin/api/models/demo/load", `{"node":"b"}`); code != 200 {
		t.Fatalf("load on b: %d %v", code, out)
	}
	prompt := strings.Repeat("a long shared prefix for the cache ", 20)
	if code, _ := chatText(t, b, "demo", prompt, `,"temperature":0`); code != 200 {
		t.Fatalf("chat on b: %d", code)
	}
	probe := fmt.Sprintf(`{"model_id":"demo","messages":[{"role":"user","content":%q}]}`, prompt)
	code, out := adminDo(t, a, http.MethodPost, "/admin/api/cache/probe", probe)
	if code != 200 || out["node"] != "b" || out["model_loaded"] != true || num(out, "blocks_ssd_hot") <= 0 || len(out["nodes"].([]any)) != 3 {
		t.Fatalf("probe through a: %d %v", code, out)
	}
	code, out = adminDo(t, a, http.MethodPost, "/admin/api/cache/probe?node=c", probe)
	if code != 200 || out["node"] != "c" || out["model_loaded"] != false || num(out, "blocks_ssd_hot") != 0 || num(out, "total_blocks") <= 0 {
		t.Fatalf("probe on c through a: %d %v", code, out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/cache/probe", `{"model_id":"demo"}`); code != 400 || errParam(out) != "messages" {
		t.Errorf("probe without messages: %d %v", code, out)
	}

	code, out = adminDo(t, c, http.MethodPost, "/admin/api/hot-cache/clear?node=a", "")
	if nodes, _ := out["nodes"].(map[string]any); code != 200 || len(nodes) != 1 || nodes["a"] == nil {
		t.Fatalf("clear a's hot cache through c: %d %v", code, out)
	}
	if _, out := adminDo(t, a, http.MethodPost, "/admin/api/cache/probe?node=b", probe); num(out, "blocks_ssd_hot") <= 0 {
		t.Fatalf("clearing a's cache cleared b's: %v", out)
	}
	code, out = adminDo(t, c, http.MethodPost, "/admin/api/hot-cache/clear", "")
	if nodes, _ := out["nodes"].(map[string]any); code != 200 || len(nodes) != 3 || num(out, "cleared_blocks") <= 0 {
		t.Fatalf("cluster-wide clear through c: %d %v", code, out)
	}
	if _, out := adminDo(t, a, http.MethodPost, "/admin/api/cache/probe?node=b", probe); num(out, "blocks_ssd_hot") != 0 {
		t.Fatalf("b's cache after a cluster-wide clear: %v", out)
	}
	if code, out := adminDo(t, c, http.MethodPost, "/admin/api/ssd-cache/clear", ""); code != 200 || len(out["nodes"].(map[string]any)) != 3 {
		t.Errorf("cluster-wide SSD clear: %d %v", code, out)
	}
}
