package dashboard_test

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"fusion/node/nodetest"
)

// client is a browser stand-in: a cookie jar and the panel's CSRF token.
type client struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

func newClient(t *testing.T, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, http: &http.Client{Jar: jar}}
}

// do sends a request with the jar's cookies and the given headers, and
// returns the status and the decoded JSON (nil when not JSON).
func (c *client) do(method, path, body string, header map[string]string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	return resp.StatusCode, resp.Header, doc
}

func errCode(doc map[string]any) string {
	e, _ := doc["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestSessionFlow: sign-in with the admin key (wrong keys, bad bodies and
// other origins refused), the session cookie's attributes, the session
// opening the admin API and the /v1 routes, the CSRF token required on
// every state-changing call, and sign-out ending the session.
func TestSessionFlow(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: key, AuthFailures: -1})
	c := newClient(t, n.URL())

	if code, _, doc := c.do("GET", "/admin/session", "", nil); code != 200 || doc["auth"] != true || doc["signed_in"] != false {
		t.Fatalf("before sign-in: %d %v", code, doc)
	}
	for _, tc := range []struct {
		name, body string
		header     map[string]string
		status     int
		code       string
	}{
		{"wrong key", `{"key":"nope"}`, nil, 401, "invalid_api_key"},
		{"not JSON", `key=` + key, nil, 400, "invalid_value"},
		{"no key", `{}`, nil, 400, "invalid_value"},
		{"key not a string", `{"key":1}`, nil, 400, "invalid_value"},
		{"too large", `{"key":"` + strings.Repeat("x", 5000) + `"}`, nil, 413, "request_too_large"},
		{"other origin", `{"key":"` + key + `"}`, map[string]string{"Origin": "https://evil.example"}, 403, "csrf_failed"},
	} {
		code, hdr, doc := c.do("POST", "/admin/session", tc.body, tc.header)
		if code != tc.status || errCode(doc) != tc.code || hdr.Get("Set-Cookie") != "" {
			t.Errorf("%s: %d %v (cookie %q), want %d %s", tc.name, code, doc, hdr.Get("Set-Cookie"), tc.status, tc.code)
		}
	}
	if code, _, doc := c.do("GET", "/admin/api/stats", "", nil); code != 401 {
		t.Fatalf("the API without a session: %d %v", code, doc)
	}

	code, hdr, doc := c.do("POST", "/admin/session", `{"key":"`+key+`"}`, map[string]string{"Origin": n.URL()})
	c.csrf, _ = doc["csrf_token"].(string)
	if code != 200 || doc["signed_in"] != true || len(c.csrf) < 40 {
		t.Fatalf("sign-in: %d %v", code, doc)
	}
	sc := hdr.Get("Set-Cookie")
	for _, want := range []string{n.Router().Panel().CookieName() + "=", "HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"} {
		if !strings.Contains(sc, want) {
			t.Errorf("session cookie %q lacks %q", sc, want)
		}
	}
	if strings.Contains(sc, key) {
		t.Error("the cookie holds the admin key")
	}
	if code, _, doc := c.do("GET", "/admin/session", "", nil); code != 200 || doc["csrf_token"] != c.csrf {
		t.Errorf("after a reload: %d %v", code, doc)
	}

	chat := `{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
		code                     string
	}{
		{"read", "GET", "/admin/api/stats", "", nil, 200, ""},
		{"write without token", "POST", "/admin/api/stats/clear", "", nil, 403, "csrf_failed"},
		{"write with a wrong token", "POST", "/admin/api/stats/clear", "", map[string]string{"X-CSRF-Token": "x" + c.csrf[1:]}, 403, "csrf_failed"},
		{"write from another origin", "POST", "/admin/api/stats/clear", "", map[string]string{"X-CSRF-Token": c.csrf, "Origin": "http://evil.example"}, 403, "csrf_failed"},
		{"write", "POST", "/admin/api/stats/clear", "", map[string]string{"X-CSRF-Token": c.csrf, "Origin": n.URL()}, 200, ""},
		{"chat without token", "POST", "/v1/chat/completions", chat, nil, 403, "csrf_failed"},
		{"chat", "POST", "/v1/chat/completions", chat, map[string]string{"X-CSRF-Token": c.csrf}, 200, ""},
		// A key sent by the client is checked as it is: the session adds nothing.
		{"a wrong key beside the session", "GET", "/admin/api/stats", "", map[string]string{"Authorization": "Bearer nope"}, 401, "invalid_api_key"},
		{"unknown API path", "GET", "/admin/api/nope", "", nil, 404, "unknown_url"},
	} {
		if code, _, doc := c.do(tc.method, tc.path, tc.body, tc.header); code != tc.status || errCode(doc) != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, code, doc, tc.status, tc.code)
		}
	}

	// Another client's forged cookie opens nothing.
	forged := newClient(t, n.URL())
	u, _ := url.Parse(n.URL())
	forged.http.Jar.SetCookies(u, []*http.Cookie{{Name: n.Router().Panel().CookieName(), Value: c.csrf}})
	if code, _, _ := forged.do("GET", "/admin/api/stats", "", nil); code != 401 {
		t.Errorf("a forged cookie: %d", code)
	}

	if code, _, doc := c.do("DELETE", "/admin/session", "", nil); code != 403 || errCode(doc) != "csrf_failed" {
		t.Errorf("sign-out without token: %d %v", code, doc)
	}
	if code, _, doc := c.do("DELETE", "/admin/session", "", map[string]string{"X-CSRF-Token": c.csrf}); code != 200 || doc["signed_in"] != false {
		t.Fatalf("sign-out: %d %v", code, doc)
	}
	if code, _, _ := c.do("GET", "/admin/api/stats", "", nil); code != 401 {
		t.Errorf("after sign-out: %d", code)
	}
}

// TestPanelPages: every /admin/ path but the API is the page (history
// routes), with the security headers; assets have their types; other
// methods and unknown assets are refused in the API's shape.
func TestPanelPages(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: key})
	c := newClient(t, n.URL())
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/admin/", 200, "text/html"},
		{"GET", "/admin/models", 200, "text/html"},
		{"GET", "/admin/logs/deep/link", 200, "text/html"},
		{"GET", "/admin/assets/app.js", 200, "text/javascript"},
		{"GET", "/admin/assets/style.css", 200, "text/css"},
		{"GET", "/admin/assets/nope.js", 404, "application/json"},
		{"GET", "/admin/assets/", 404, "application/json"},
		{"POST", "/admin/models", 405, "application/json"},
		{"GET", "/admin/api/nope", 404, "application/json"}, // the API's answer, not the page
	} {
		req, _ := http.NewRequest(tc.method, n.URL()+tc.path, nil)
		resp, err := c.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, tc.ctype)
		}
		if strings.HasPrefix(tc.path, "/admin/api/") {
			continue
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: security headers %v", tc.method, tc.path, resp.Header)
		}
	}
	if resp, err := c.http.Get(n.URL() + "/admin/assets/index.html"); err != nil || resp.StatusCode != 404 {
		t.Errorf("a file outside assets: %v %v", resp.StatusCode, err)
	}
}

// TestSignInFailuresLimited: failed sign-ins count against the address's
// failed-attempt limit, shared with the API's key checks.
func TestSignInFailuresLimited(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{APIKey: key, AuthFailures: 2})
	c := newClient(t, n.URL())
	for range 2 {
		if code, _, doc := c.do("POST", "/admin/session", `{"key":"guess"}`, nil); code != 401 {
			t.Fatalf("a guess: %d %v", code, doc)
		}
	}
	if code, hdr, doc := c.do("POST", "/admin/session", `{"key":"`+key+`"}`, nil); code != 429 || errCode(doc) != "too_many_failures" || hdr.Get("Retry-After") == "" {
		t.Errorf("after 2 failures: %d %v", code, doc)
	}
	if code, _, _ := c.do("GET", "/v1/models", "", map[string]string{"Authorization": "Bearer " + key}); code != 429 {
		t.Errorf("the API after 2 failed sign-ins: %d", code)
	}
}

// TestPanelWithoutAuth: a node that checks no key needs no sign-in.
func TestPanelWithoutAuth(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{})
	c := newClient(t, n.URL())
	if code, _, doc := c.do("GET", "/admin/session", "", nil); code != 200 || doc["auth"] != false || doc["signed_in"] != true {
		t.Errorf("session: %d %v", code, doc)
	}
	if code, _, doc := c.do("POST", "/admin/session", `{"key":"x"}`, nil); code != 400 || errCode(doc) != "auth_off" {
		t.Errorf("sign-in: %d %v", code, doc)
	}
	if code, _, _ := c.do("GET", "/admin/api/stats", "", nil); code != 200 {
		t.Errorf("the API: %d", code)
	}
}
