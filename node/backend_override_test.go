package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/engine/backend/mlx"
	"fusion/engine/runner"
	"fusion/internal/testenv"
	"fusion/node/nodetest"
	"fusion/router/servedby"
)

// overrideChat posts a chat request with backend_override (with key when
// not empty) and returns the status, the node that served it and the
// error message, if any.
func overrideChat(t *testing.T, url, key, backend string) (int, string, string) {
	t.Helper()
	body := `{"model":"` + nodetest.Model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"backend_override":"` + backend + `"}`
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e errorBody
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, resp.Header.Get(servedby.Header), e.Error.Message
}

// TestBackendOverrideOneNode: a lone CPU node serves backend_override
// "cpu", answers "mlx" with a 503 saying where the model runs, "cloud"
// with a 400 while no cloud upstream serves the model, and refuses values
// that are not backends with a 400 listing them.
func TestBackendOverrideOneNode(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{Backend: runner.BackendCPU})
	tests := []struct {
		backend string
		code    int
		msg     string
	}{
		{"cpu", 200, ""},
		{"", 200, ""},
		{"mlx", 503, `runs on the cpu backend on this node, not mlx`},
		{"rapid", 200, ""},
		{"cloud", 400, `no cloud upstream is configured for the model "demo"`},
		{"gpu9", 400, `not one of mlx, cpu, rapid, cloud`},
	}
	for _, tc := range tests {
		code, _, msg := overrideChat(t, n.URL(), "", tc.backend)
		if code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("backend_override %q: %d %q, want %d with %q", tc.backend, code, msg, tc.code, tc.msg)
		}
	}
}

// TestBackendOverrideCluster: in a cluster of an MLX node and a CPU node,
// backend_override sends a request to the node whose engine runs the
// model on that backend, from either node.
func TestBackendOverrideCluster(t *testing.T) {
	testenv.NeedMLX(t, mlx.Available())
	models := nodetest.Models(t)
	a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: runner.BackendMLX, Cluster: nodetest.Member("a", 1, nil)})
	b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Backend: runner.BackendCPU, Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})})
	want := map[string]string{"mlx": "a", "cpu": "b"}
	deadline := time.Now().Add(30 * time.Second)
	for _, from := range []struct {
		name string
		url  string
	}{{"a", a.URL()}, {"b", b.URL()}} {
		for _, be := range []string{"mlx", "cpu"} {
			for {
				code, node, msg := overrideChat(t, from.url, "k", be)
				if code == 200 && node == want[be] {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s on %s: %d served by %q (%s), want 200 from %s", be, from.name, code, node, msg, want[be])
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}
