package router_test

import (
	"net/url"
	"testing"

	"fusion/internal/logfile"
	"fusion/node/nodetest"
)

// adminRoutes are the admin routes with a body (or a query) to fuzz.
var adminRoutes = []struct{ method, path, seed string }{
	{"PUT", "/admin/api/models/demo/settings", `{"temperature":0.5,"alias":"fast","max_context":64,"tool_parser":"hermes"}`},
	{"PUT", "/admin/api/models/nope/settings", `{"pinned":true}`},
	{"POST", "/admin/api/models/demo/load", `{"node":""}`},
	{"POST", "/admin/api/models/demo/unload", ``},
	{"POST", "/admin/api/global-settings", `{"log_level":"warn","max_queued":8}`},
	{"GET", "/admin/api/global-settings", ``},
	{"POST", "/admin/api/cache/probe", `{"model_id":"demo","messages":[{"role":"user","content":"hi"}]}`},
	{"POST", "/admin/api/hot-cache/clear", ``},
	{"POST", "/admin/api/ssd-cache/clear", ``},
	{"GET", "/admin/api/stats", ``},
	{"POST", "/admin/api/stats/clear", ``},
	{"POST", "/admin/api/stats/clear-alltime", ``},
	{"GET", "/admin/api/models", ``},
	{"GET", "/admin/api/logs?lines=", `5`}, // the body goes into the query
	{"POST", "/admin/api/hf/download", `{"repo":"x"}`},
	{"POST", "/admin/api/bench/run", `{}`},
}

// FuzzAdminRoutes sends arbitrary bodies (and ?node, ?lines values) to
// every admin route of a real node: never a 5xx, errors in the OpenAI
// shape.
func FuzzAdminRoutes(f *testing.F) {
	for i, r := range adminRoutes {
		f.Add(uint8(i), r.seed, "")
	}
	for _, b := range malformed {
		f.Add(uint8(0), b, "")
		f.Add(uint8(4), b, "x")
	}
	logs, err := logfile.Open(f.TempDir(), logfile.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer logs.Close()
	n := nodetest.Start(f, nodetest.Options{APIKey: key, Logs: logs, MaxBodyBytes: 64 << 10})
	hdr := map[string]string{"Authorization": "Bearer " + key}
	f.Fuzz(func(t *testing.T, which uint8, body, node string) {
		r := adminRoutes[int(which)%len(adminRoutes)]
		u := n.URL() + r.path
		if r.method == "GET" && r.path == "/admin/api/logs?lines=" {
			u += url.QueryEscape(body)
		}
		if node != "" {
			if r.path == "/admin/api/logs?lines=" {
				u += "&node=" + url.QueryEscape(node)
			} else {
				u += "?node=" + url.QueryEscape(node)
			}
		}
		resp, b := do(t, r.method, u, body, hdr)
		switch {
		case resp.StatusCode >= 500 && resp.StatusCode != 501:
			t.Fatalf("%s %s %q: status %d: %s", r.method, u, body, resp.StatusCode, b)
		case resp.StatusCode >= 400:
			apiError(t, b)
		}
	})
}
