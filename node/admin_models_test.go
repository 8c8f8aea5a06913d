package node_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/node/nodetest"
)

// TestAdminModelRoutes: the pool's list, load and unload over HTTP, with
// the errors: unknown model 404, unload while a request runs 409, no key
// 401.
func TestAdminModelRoutes(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: "k"})
	do := func(method, path, key string) (int, map[string]any) {
		t.Helper()
		return adminDoKey(t, n, key, method, path, "")
	}
	stateOf := func() string {
		_, list := do("GET", "/admin/api/models", "k")
		for _, m := range list["data"].([]any) {
			if m := m.(map[string]any); m["id"] == "demo" {
				return m["state"].(string)
			}
		}
		t.Fatalf("demo not listed: %v", list)
		return ""
	}
	if s := stateOf(); s != "unloaded" {
		t.Fatalf("before load: %s", s)
	}
	code, res := do("POST", "/admin/api/models/demo/load", "k")
	if m, _ := res["model"].(map[string]any); code != 200 || res["status"] != "ok" || m["state"] != "idle" || m["bytes"].(float64) <= 0 {
		t.Fatalf("load: %d %v", code, res)
	}
	if code, res := do("POST", "/admin/api/models/nope/load", "k"); code != 404 || res["error"].(map[string]any)["code"] != "model_not_found" {
		t.Errorf("load unknown: %d %v", code, res)
	}
	if code, _ := do("POST", "/admin/api/models/demo/load", "wrong"); code != 401 {
		t.Errorf("without the key: %d", code)
	}

	// A running request keeps the model: unload answers 409.
	open := nodetest.Start(t, nodetest.Options{}) // /tokenize without the key
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":2000,"stream":true,"logit_bias":` + noEOSBias(t, open.URL()) + `}`
	req, _ := http.NewRequest("POST", n.URL()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Scan()
	if code, res := do("POST", "/admin/api/models/demo/unload", "k"); code != 409 || res["error"].(map[string]any)["code"] != "model_busy" {
		t.Errorf("unload while busy: %d %v", code, res)
	}
	resp.Body.Close() // the client leaves; its request is cancelled
	for i := 0; ; i++ {
		code, res := do("POST", "/admin/api/models/demo/unload", "k")
		if code == 200 {
			if res["model"].(map[string]any)["state"] != "unloaded" {
				t.Fatalf("unload: %v", res)
			}
			break
		}
		if i > 200 {
			t.Fatalf("unload after the request ended: %d %v", code, res)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := stateOf(); s != "unloaded" {
		t.Fatalf("after unload: %s", s)
	}
}
