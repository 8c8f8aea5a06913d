package dashboard

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestSessionLimits: a session ends at its TTL, and past MaxSessions a
// sign-in ends the session that expires first; both come from Options.
func TestSessionLimits(t *testing.T) {
	// The handler runs on this goroutine (httptest.NewRecorder), so a
	// plain variable is the clock.
	now := time.Unix(1_800_000_000, 0)
	p := New(Config{AdminKey: "k", Now: func() time.Time { return now }, Logger: slog.New(slog.DiscardHandler), Options: Options{SessionTTL: time.Minute, MaxSessions: 2}})
	// next answers whether the request reached it with the admin key.
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer k" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	h := p.Wrap(next)
	signIn := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/session", strings.NewReader(`{"key":"k"}`)))
		if rec.Code != 200 {
			t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
		}
		c := rec.Result().Cookies()
		if len(c) != 1 || c[0].MaxAge != 60 {
			t.Fatalf("cookies %v", c)
		}
		return c[0].Value
	}
	use := func(secret string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/admin/api/stats", nil)
		req.AddCookie(&http.Cookie{Name: p.CookieName(), Value: secret})
		h.ServeHTTP(rec, req)
		return rec.Code
	}

	first := signIn()
	now = now.Add(10 * time.Second)
	second := signIn()
	if use(first) != 200 || use(second) != 200 {
		t.Fatal("two sessions under the cap")
	}
	now = now.Add(10 * time.Second)
	third := signIn() // past the cap: first (expiring first) ends
	cases := []struct {
		name   string
		secret string
		want   int
	}{{"evicted", first, 401}, {"second", second, 200}, {"third", third, 200}}
	for _, c := range cases {
		if got := use(c.secret); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if n := p.sessions.(*MemSessions).Len(); n != 2 {
		t.Errorf("%d sessions held, want 2", n)
	}
	now = now.Add(51 * time.Second) // second is 61 s old, third 51 s
	if use(second) != 401 || use(third) != 200 {
		t.Errorf("at the TTL: second %d, third %d", use(second), use(third))
	}
	if p.cookie != "fusion_panel" {
		t.Errorf("cookie name %q", p.cookie)
	}
	if got := New(Config{NodeID: "mac mini.2"}).CookieName(); got != "fusion_panel_mac_mini_2" {
		t.Errorf("cookie name of a node id: %q", got)
	}
}

// TestCookieDomain: with Options.CookieDomain the session cookie names
// the domain (members on several hosts under it all get it); without,
// it has none (the host that set it only). CheckCookieDomain refuses
// what is not a host name.
func TestCookieDomain(t *testing.T) {
	for _, domain := range []string{"", "lan.example"} {
		p := New(Config{AdminKey: "k", Logger: slog.New(slog.DiscardHandler), Options: Options{CookieDomain: domain}})
		rec := httptest.NewRecorder()
		p.Wrap(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("POST", "/admin/session", strings.NewReader(`{"key":"k"}`)))
		c := rec.Result().Cookies()
		if rec.Code != 200 || len(c) != 1 || c[0].Domain != domain {
			t.Errorf("domain %q: %d, cookies %v", domain, rec.Code, c)
		}
	}
	for d, ok := range map[string]bool{"lan.example": true, ".lan.example": true, "mac-mini": true,
		"http://lan.example": false, "lan.example:8000": false, "a b": false, "lan.example/": false, "-x.example": false} {
		if err := CheckCookieDomain(d); (err == nil) != ok {
			t.Errorf("CheckCookieDomain(%q) = %v", d, err)
		}
	}
}
