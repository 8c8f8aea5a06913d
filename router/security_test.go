package router_test

import (
	"encoding/json"
	"fusion/internal/testenv"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/node/nodetest"
	"fusion/router/auth"
)

// anthropicRoute: the routes that answer in Anthropic's shape.
func anthropicRoute(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") || path == "/v1/count_tokens"
}

// checkShape fails unless b is an error of the route's dialect whose
// text mentions want.
func checkShape(t *testing.T, what, path string, b []byte, want string) {
	t.Helper()
	if anthropicRoute(path) {
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type == "" || !strings.Contains(b2s(b), want) {
			t.Fatalf("%s %s: not an Anthropic error with %q: %s", what, path, want, b)
		}
		return
	}
	if !json.Valid(b) {
		t.Fatalf("%s %s: not a JSON error: %q", what, path, b)
	}
	apiError(t, b)
	if !strings.Contains(b2s(b), want) {
		t.Fatalf("%s %s: %s, want %q", what, path, b, want)
	}
}

func b2s(b []byte) string { return string(b) }

// TestSecuritySuite walks every route of the router (so a new route is
// covered without editing this test) and checks that it refuses no key,
// a wrong key, a sub-key without the route's scope, an expired sub-key
// and a key in the query string, each with a 401/403 in the route's
// dialect; then that the logs never show a key.
func TestSecuritySuite(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	n := nodetest.Start(t, nodetest.Options{APIKey: key, AuthFailures: -1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	admin := map[string]string{"Authorization": "Bearer " + key}
	newKey := func(body string) auth.KeyDoc {
		resp, b := do(t, "POST", n.URL()+"/admin/api/subkeys", body, admin)
		var d auth.KeyDoc
		if resp.StatusCode != 201 || json.Unmarshal(b, &d) != nil || d.Key == "" {
			t.Fatalf("create %s: %d %s", body, resp.StatusCode, b)
		}
		return d
	}
	// scopesBut is the JSON list of every scope but drop.
	scopesBut := func(drop ...auth.Scope) string {
		var out []string
	next:
		for _, s := range auth.Scopes {
			for _, d := range drop {
				if s == d {
					continue next
				}
			}
			out = append(out, `"`+string(s)+`"`)
		}
		return "[" + strings.Join(out, ",") + "]"
	}
	lacking := map[auth.Scope]auth.KeyDoc{}
	secrets := []string{key}
	for _, s := range auth.Scopes {
		drop := []auth.Scope{s}
		if s == auth.ScopeAdminRead {
			drop = append(drop, auth.ScopeAdmin) // admin implies admin-read
		}
		lacking[s] = newKey(`{"scopes":` + scopesBut(drop...) + `}`)
		secrets = append(secrets, lacking[s].Key)
	}
	expired := newKey(`{"scopes":` + scopesBut() + `,"expires_in":1}`)
	secrets = append(secrets, expired.Key)
	time.Sleep(1100 * time.Millisecond)

	type route struct{ method, path string }
	var routes []route
	err := chi.Walk(n.Router().Routes(), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		path := strings.NewReplacer("{id}", "x", "{model}", "demo", "*", "demo").Replace(pattern)
		if strings.Contains(path, "{") {
			t.Fatalf("route %s has a parameter this test does not fill", pattern)
		}
		routes = append(routes, route{method, path})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) < 25 {
		t.Fatalf("only %d routes walked", len(routes))
	}
	for _, r := range routes {
		if r.path == "/health" {
			continue // open by design: load balancers probe it
		}
		scope := auth.ScopeOf(r.method, r.path)
		cases := []struct {
			what   string
			query  string
			header map[string]string
			status int
			want   string
		}{
			{"no key", "", nil, 401, "didn't provide an API key"},
			{"wrong key", "", map[string]string{"Authorization": "Bearer sk-wrong"}, 401, "Incorrect API key"},
			{"wrong x-api-key", "", map[string]string{"x-api-key": "sk-wrong"}, 401, "Incorrect API key"},
			{"no scope", "", map[string]string{"Authorization": "Bearer " + lacking[scope].Key}, 403, "lacks the '" + string(scope) + "' scope"},
			{"expired", "", map[string]string{"x-api-key": expired.Key}, 401, "expired"},
			{"key in query", "?api_key=" + key, nil, 401, "query string"},
			{"key in query with a header", "?key=" + key, admin, 401, "query string"},
		}
		for _, c := range cases {
			resp, b := do(t, r.method, n.URL()+r.path+c.query, `{"model":"demo"}`, c.header)
			if resp.StatusCode != c.status {
				t.Fatalf("%s %s, %s: %d %s, want %d", r.method, r.path, c.what, resp.StatusCode, b, c.status)
			}
			if r.method == http.MethodHead {
				continue // a HEAD answer has no body (a route for every method, as /mcp's, lists HEAD too)
			}
			checkShape(t, c.what, r.path, b, c.want)
		}
	}

	// The admin key and the sub-keys never reach the logs.
	out := logs.String()
	if !strings.Contains(out, "http request") || !strings.Contains(out, "sub-key created") {
		t.Fatalf("the logs were not captured: %.300s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatalf("a key is in the logs: %s", s[:8])
		}
	}
	t.Logf("%d routes × 7 refusals checked; %d bytes of logs without a key", len(routes), len(out))
}

// TestFailedAttemptsPerAddress: a node refuses an address that failed
// too often, even with the right key, for the rest of the window.
func TestFailedAttemptsPerAddress(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: key, AuthFailures: 3})
	for i := range 3 {
		if resp, b := do(t, "GET", n.URL()+"/v1/models", "", map[string]string{"Authorization": "Bearer sk-guess"}); resp.StatusCode != 401 {
			t.Fatalf("guess %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := do(t, "GET", n.URL()+"/v1/models", "", map[string]string{"Authorization": "Bearer " + key})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after 3 failures: %d %s", resp.StatusCode, b)
	}
	msg, typ, _, _ := apiError(t, b)
	if typ != "rate_limit_error" || !strings.Contains(msg, "failed authentication") {
		t.Fatalf("after 3 failures: %s", b)
	}
}
