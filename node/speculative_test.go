package node_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"fusion/engine/demo"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// specChat posts a greedy chat request (extra: more JSON fields) to n and
// returns the status, the answer's text and its usage.
func specChat(t *testing.T, n *node.Node, extra string) (int, string, map[string]any) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"one two three one two three one two"}],"max_tokens":24,"temperature":0%s}`, nodetest.Model, extra)
	code, out := adminDo(t, n, http.MethodPost, "/v1/chat/completions", body)
	var text string
	if ch, ok := out["choices"].([]any); ok && len(ch) > 0 {
		msg, _ := ch[0].(map[string]any)["message"].(map[string]any)
		text, _ = msg["content"].(string)
	}
	u, _ := out["usage"].(map[string]any)
	return code, text, u
}

// metricValue reads one counter of n's /metrics (Prometheus format).
func metricValue(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, n.URL()+"/metrics?format=prometheus", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatalf("%s not in /metrics", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestSpeculativeOverHTTP: backend_override "rapid" gives the greedy
// answer of a plain request with usage.speculative; the draft settings
// are validated (400 naming the key); a draft model set by an admin
// drafts and "speculative" makes it the default; /metrics counts the
// drafts.
func TestSpeculativeOverHTTP(t *testing.T) {
	models := nodetest.Models(t)
	if _, err := demo.Create(filepath.Join(models, "draft"), demo.Options{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.Create(filepath.Join(models, "other-vocab"), demo.Options{Layers: 1, Hidden: 32, Heads: 2, KVHeads: 1, Intermediate: 64, VocabFrom: testenv.TokenizerDir(t, "qwen3")}); err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models})

	code, plain, u := specChat(t, n, "")
	if code != 200 || u["speculative"] != nil {
		t.Fatalf("plain: %d %q %v", code, plain, u)
	}
	code, text, u := specChat(t, n, `,"backend_override":"rapid"`)
	sp, _ := u["speculative"].(map[string]any)
	if code != 200 || text != plain || sp == nil || sp["drafted"].(float64) == 0 {
		t.Fatalf("rapid (prompt lookup): %d %q %v, plain %q", code, text, u, plain)
	}

	for _, c := range []struct{ body, param string }{
		{`{"num_draft_tokens":99}`, "num_draft_tokens"},
		{`{"num_draft_tokens":-1}`, "num_draft_tokens"},
		{`{"draft_model":"nope"}`, "draft_model"},
		{`{"draft_model":"demo"}`, "draft_model"},
		{`{"draft_model":"other-vocab"}`, "draft_model"},
		{`{"speculative":"yes"}`, "speculative"},
	} {
		code, out := adminDo(t, n, http.MethodPut, "/admin/api/models/demo/settings", c.body)
		if code != 400 || errParam(out) != c.param {
			t.Errorf("%s: %d %v (want 400 naming %s)", c.body, code, out, c.param)
		}
	}
	if code, out := adminDo(t, n, http.MethodPut, "/admin/api/models/demo/settings", `{"draft_model":"draft","num_draft_tokens":3,"speculative":true}`); code != 200 {
		t.Fatalf("put settings: %d %v", code, out)
	}
	drafted := metricValue(t, n, "fusion_speculative_drafted_tokens_total")
	code, text, u = specChat(t, n, "") // speculative by default now
	sp, _ = u["speculative"].(map[string]any)
	if code != 200 || text != plain || sp == nil || sp["drafted"].(float64) == 0 {
		t.Fatalf("draft model by default: %d %q %v, plain %q", code, text, u, plain)
	}
	if got := metricValue(t, n, "fusion_speculative_drafted_tokens_total"); got != drafted+sp["drafted"].(float64) {
		t.Errorf("drafted counter %v, want %v + %v", got, drafted, sp["drafted"])
	}
	if got := metricValue(t, n, "fusion_speculative_accepted_tokens_total"); got < sp["accepted"].(float64) {
		t.Errorf("accepted counter %v < %v", got, sp["accepted"])
	}
	_, snap := adminDo(t, n, http.MethodGet, "/metrics", "")
	if e, _ := snap["engine"].(map[string]any); e == nil || e["speculative"].(map[string]any)["drafted"].(float64) < sp["drafted"].(float64) {
		t.Errorf("/metrics JSON: %v", snap["engine"])
	}
}

// TestSpeculativeForwarded: a node without the model forwards a "rapid"
// request to the peer that has it; the answer and usage.speculative come
// back through the neutral request and events.
func TestSpeculativeForwarded(t *testing.T) {
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: nodetest.Models(t), Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})
	_, plain, _ := specChat(t, a, "")
	eventually(t, "a rapid answer through b", func() string {
		code, text, u := specChat(t, b, `,"backend_override":"rapid"`)
		sp, _ := u["speculative"].(map[string]any)
		if code != 200 || text != plain || sp == nil || sp["drafted"].(float64) == 0 {
			return fmt.Sprintf("%d %q %v, plain %q", code, text, u, plain)
		}
		return ""
	})
}
