package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/router/openai"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestScopeOf(t *testing.T) {
	tests := []struct {
		method, path string
		want         Scope
	}{
		{"POST", "/v1/chat/completions", ScopeInference},
		{"POST", "/v1/completions", ScopeInference},
		{"POST", "/v1/messages", ScopeInference},
		{"POST", "/v1/messages/count_tokens", ScopeInference},
		{"POST", "/v1/responses", ScopeInference},
		{"GET", "/v1/models/demo", ScopeInference},
		{"POST", "/tokenize", ScopeInference},
		{"POST", "/v1/embeddings", ScopeEmbeddings},
		{"POST", "/v1/rerank", ScopeEmbeddings},
		{"POST", "/rerank", ScopeEmbeddings},
		{"POST", "/v1/rerankers", ScopeAdmin},
		{"POST", "/v1/audio/transcriptions", ScopeAudio},
		{"POST", "/v1/images/generations", ScopeImages},
		{"GET", "/v1/mcp/tools", ScopeMCP},
		{"POST", "/mcp", ScopeMCP},
		{"POST", "/v1/openclaw/agent/turns", ScopeAgent},
		{"GET", "/admin/api/stats", ScopeAdminRead},
		{"HEAD", "/admin/api/stats", ScopeAdminRead},
		{"GET", "/metrics", ScopeAdminRead},
		{"POST", "/admin/api/subkeys", ScopeAdmin},
		{"DELETE", "/admin/api/subkeys/x", ScopeAdmin},
		{"GET", "/something/new", ScopeAdmin},
		{"GET", "/v1/chatty", ScopeAdmin}, // a prefix, not a path segment
	}
	for _, tc := range tests {
		if got := ScopeOf(tc.method, tc.path); got != tc.want {
			t.Errorf("ScopeOf(%s %s) = %s, want %s", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestLimiterSlidingWindow(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_040, 0)} // 0 s into a minute window
	l := NewLimiter(c.now)
	k := &Key{ID: "k", RequestsPerMin: 3}
	for i := range 3 {
		if ok, _ := l.Admit(k); !ok {
			t.Fatalf("request %d refused", i)
		}
	}
	ok, wait := l.Admit(k)
	if ok || wait != 60 {
		t.Fatalf("4th request: ok %v wait %d, want refused for 60 s", ok, wait)
	}
	// 45 s into the next window, a quarter of the previous one still
	// counts: 3 × 0.25 = 0.75, so two more fit (0.75+2 ≤ 3), not three.
	c.add(time.Minute + 45*time.Second)
	for i := range 2 {
		if ok, _ := l.Admit(k); !ok {
			t.Fatalf("request %d in the next window refused", i)
		}
	}
	if ok, wait := l.Admit(k); ok || wait != 15 {
		t.Fatalf("over the sliding estimate: ok %v wait %d, want refused for 15 s", ok, wait)
	}
	// A peer's report counts: with the peer's 3 requests in this window,
	// a fresh key is full.
	k2 := &Key{ID: "k2", RequestsPerMin: 3}
	w, _ := window(c.now())
	l.SetPeer("b", Report{"k2": {Window: w, Cur: Counts{Requests: 3}}})
	if ok, _ := l.Admit(k2); ok {
		t.Fatal("peer's usage ignored")
	}
	l.DropPeer("b")
	if ok, _ := l.Admit(k2); !ok {
		t.Fatal("dropped peer still counted")
	}
	// Tokens: a key past its tokens per minute is refused until they age.
	k3 := &Key{ID: "k3", TokensPerMin: 100}
	l.AddTokens("k3", 100)
	if ok, _ := l.Admit(k3); ok {
		t.Fatal("over the token limit admitted")
	}
	if got := l.Usage()["k3"]; got != (Counts{Requests: 0, Tokens: 100}) {
		t.Fatalf("usage %+v", got)
	}
	if got := l.Usage()["k"]; got.Requests != 5 {
		t.Fatalf("usage of k %+v, want 5 requests", got)
	}
}

func TestFailLimiter(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	f := NewFailLimiter(3, time.Minute, c.now)
	f.maxAddrs = 4
	for range 3 {
		if b, _ := f.Blocked("1.2.3.4"); b {
			t.Fatal("blocked early")
		}
		f.Fail("1.2.3.4")
	}
	if b, wait := f.Blocked("1.2.3.4"); !b || wait != 60 {
		t.Fatalf("after 3 failures: blocked %v wait %d", b, wait)
	}
	if b, _ := f.Blocked("5.6.7.8"); b {
		t.Fatal("another address blocked")
	}
	c.add(time.Minute)
	if b, _ := f.Blocked("1.2.3.4"); b {
		t.Fatal("still blocked after the window")
	}
	for i := range 10 { // the table stays bounded
		f.Fail(string(rune('a' + i)))
	}
	if len(f.addrs) > 4 {
		t.Fatalf("%d addresses tracked, bound 4", len(f.addrs))
	}
	if b, _ := NewFailLimiter(0, 0, nil).Blocked("x"); b {
		t.Fatal("a limit of 0 blocks")
	}
}

// server is a real HTTP server with the middleware and the sub-key
// routes, as the router mounts them, plus an echo route per scope.
func server(t testing.TB, a *Authenticator) *httptest.Server {
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(a.Middleware(func(w http.ResponseWriter, d Denial) {
			openai.WriteError(w, &openai.Error{Status: d.Status, Type: "x", Code: d.Code, Message: d.Message, RetryAfter: d.RetryAfter})
		}))
		NewRoutes(a, 3).Mount(r)
		r.Post("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body) // the handler still gets the body the middleware peeked at
			w.Write(b)
		})
		r.Post("/v1/embeddings", func(w http.ResponseWriter, r *http.Request) {})
	})
	s := httptest.NewServer(r)
	t.Cleanup(s.Close)
	return s
}

func call(t testing.TB, method, url, key, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func create(t testing.TB, url, body string) KeyDoc {
	t.Helper()
	st, _, b := call(t, "POST", url+"/admin/api/subkeys", "admin", body)
	if st != 201 {
		t.Fatalf("create %s: %d %s", body, st, b)
	}
	var d KeyDoc
	if err := json.Unmarshal(b, &d); err != nil || !strings.HasPrefix(d.Key, KeyPrefix) {
		t.Fatalf("create answer %s", b)
	}
	return d
}

func TestSubkeys(t *testing.T) {
	c := &clock{t: time.Now()}
	store := NewMemStore()
	a := New(Config{AdminKey: "admin", Keys: store, Now: c.now, Failures: NewFailLimiter(5, time.Minute, c.now)})
	s := server(t, a)

	chat := create(t, s.URL, `{"name":"chat","scopes":["inference"],"models":["demo"],"rate_limit":{"requests_per_minute":2}}`)
	exp := create(t, s.URL, `{"name":"short","scopes":["inference","embeddings"],"expires_in":60}`)
	body := `{"model":"demo","messages":[]}`
	tests := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"scoped model", "POST", "/v1/chat/completions", chat.Key, body, 200, ""},
		{"other model", "POST", "/v1/chat/completions", chat.Key, `{"model":"other"}`, 403, "model_not_allowed"},
		{"missing scope", "POST", "/v1/embeddings", chat.Key, `{}`, 403, "insufficient_scope"},
		{"admin route", "GET", "/admin/api/subkeys", chat.Key, "", 403, "insufficient_scope"},
		{"second request", "POST", "/v1/chat/completions", chat.Key, body, 200, ""},
		{"past the rate", "POST", "/v1/chat/completions", chat.Key, body, 429, "rate_limit_exceeded"},
		{"no key", "POST", "/v1/embeddings", "", "", 401, "invalid_api_key"},
		{"key in query", "POST", "/v1/embeddings?api_key=" + exp.Key, "", "", 401, "key_in_query"},
		{"before expiry", "POST", "/v1/embeddings", exp.Key, "", 200, ""},
	}
	for _, tc := range tests {
		st, h, b := call(t, tc.method, s.URL+tc.path, tc.key, tc.body)
		if st != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, st, b, tc.status)
		}
		if tc.code != "" && !bytes.Contains(b, []byte(`"code":"`+tc.code+`"`)) {
			t.Fatalf("%s: %s, want code %s", tc.name, b, tc.code)
		}
		if tc.status == 200 && tc.body != "" && string(b) != tc.body {
			t.Fatalf("%s: handler got body %q", tc.name, b)
		}
		if st == 429 && h.Get("Retry-After") == "" {
			t.Fatalf("%s: no Retry-After", tc.name)
		}
	}
	c.add(61 * time.Second)
	if st, _, b := call(t, "POST", s.URL+"/v1/embeddings", exp.Key, ""); st != 401 || !bytes.Contains(b, []byte("expired")) {
		t.Fatalf("expired key: %d %s", st, b)
	}

	// The list shows usage and never a secret; a third key fills the
	// limit of 3.
	st, _, b := call(t, "GET", s.URL+"/admin/api/subkeys", "admin", "")
	if st != 200 || bytes.Contains(b, []byte(chat.Key)) || bytes.Contains(b, []byte(`"key"`)) {
		t.Fatalf("list: %d %s", st, b)
	}
	var list struct{ Data []KeyDoc }
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) != 2 || list.Data[0].Usage == nil {
		t.Fatalf("list: %s", b)
	}
	for _, d := range list.Data {
		if d.ID == chat.ID && d.Usage.Requests != 2 {
			t.Fatalf("usage of %s: %+v, want 2 requests", d.ID, d.Usage)
		}
	}
	create(t, s.URL, `{"scopes":["mcp"]}`)
	if st, _, b := call(t, "POST", s.URL+"/admin/api/subkeys", "admin", `{"scopes":["mcp"]}`); st != 409 {
		t.Fatalf("4th key: %d %s", st, b)
	}

	// Revoked: 401 at once; deleting again is a 404.
	if st, _, b := call(t, "DELETE", s.URL+"/admin/api/subkeys/"+exp.ID, "admin", ""); st != 200 {
		t.Fatalf("delete: %d %s", st, b)
	}
	if st, _, _ := call(t, "DELETE", s.URL+"/admin/api/subkeys/"+exp.ID, "admin", ""); st != 404 {
		t.Fatalf("delete twice: %d", st)
	}
	c.add(-61 * time.Second) // not expired any more: the revocation alone refuses it
	if st, _, b := call(t, "POST", s.URL+"/v1/embeddings", exp.Key, ""); st != 401 || !bytes.Contains(b, []byte("revoked")) {
		t.Fatalf("revoked key: %d %s", st, b)
	}
}

func TestSubkeyBodies(t *testing.T) {
	a := New(Config{AdminKey: "admin", Keys: NewMemStore()})
	s := server(t, a)
	tests := []struct{ body, param string }{
		{`{"scopes":[]}`, "scopes"},
		{`{"scopes":["root"]}`, "scopes[0]"},
		{`{"scopes":["mcp","mcp"]}`, "scopes[1]"},
		{`{"scopes":"mcp"}`, "scopes"},
		{`{"scopes":["mcp"],"colour":1}`, "colour"},
		{`{"scopes":["mcp"],"rate_limit":{"requests_per_minute":-1}}`, "rate_limit.requests_per_minute"},
		{`{"scopes":["mcp"],"expires_at":"2001-01-01T00:00:00Z"}`, "expires_at"},
		{`{"scopes":["mcp"],"expires_at":"tomorrow"}`, "expires_at"},
		{`{"scopes":["mcp"],"expires_in":0}`, "expires_in"},
		{`{"scopes":["mcp"],"models":[""]}`, "models[0]"},
		{`{"scopes":["mcp"],"name":"` + strings.Repeat("n", 200) + `"}`, "name"},
		{`[]`, ""},
		{`{"scopes":["mcp"]} {}`, ""},
	}
	for _, tc := range tests {
		st, _, b := call(t, "POST", s.URL+"/admin/api/subkeys", "admin", tc.body)
		var e struct{ Error struct{ Param *string } }
		if st != 400 || json.Unmarshal(b, &e) != nil {
			t.Fatalf("%s: %d %s", tc.body, st, b)
		}
		if got := ""; e.Error.Param != nil {
			got = *e.Error.Param
			if got != tc.param {
				t.Fatalf("%s: param %q, want %q", tc.body, got, tc.param)
			}
		} else if tc.param != "" {
			t.Fatalf("%s: no param, want %q", tc.body, tc.param)
		}
	}
}

func TestFailedAttemptsLimited(t *testing.T) {
	a := New(Config{AdminKey: "admin", Keys: NewMemStore(), Failures: NewFailLimiter(3, time.Minute, nil)})
	s := server(t, a)
	for i := range 3 {
		if st, _, _ := call(t, "GET", s.URL+"/admin/api/subkeys", "guess", ""); st != 401 {
			t.Fatalf("attempt %d: %d", i, st)
		}
	}
	st, h, b := call(t, "GET", s.URL+"/admin/api/subkeys", "admin", "")
	if st != 429 || h.Get("Retry-After") == "" || !bytes.Contains(b, []byte("too_many_failures")) {
		t.Fatalf("after 3 failures: %d %s (Retry-After %q)", st, b, h.Get("Retry-After"))
	}
}

func TestFileStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "subkeys.json")
	s, err := OpenFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Revoke(ctx, "nope", time.Now()); err != ErrNotFound {
		t.Fatalf("revoke unknown: %v", err)
	}
	id, secret := NewSecret()
	id2, secret2 := NewSecret()
	exp := time.Now().Add(time.Hour).Round(0)
	for _, k := range []Key{{ID: id, Name: "a", Hash: Hash(secret), Scopes: []Scope{ScopeMCP}, Models: []string{"m"}, RequestsPerMin: 3, Expires: exp},
		{ID: id2, Hash: Hash(secret2), Scopes: []Scope{ScopeAdmin}}} {
		if err := s.Put(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Revoke(ctx, id2, time.Now()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || bytes.Contains(b, []byte(secret)) {
		t.Fatalf("file %v %v holds: %s", fi.Mode(), err, b)
	}
	again, err := OpenFileStore(path) // a restart
	if err != nil {
		t.Fatal(err)
	}
	k, ok := again.Lookup(Hash(secret))
	if !ok || k.Name != "a" || k.RequestsPerMin != 3 || !k.Expires.Equal(exp) || k.Models[0] != "m" || !k.Has(ScopeMCP) {
		t.Fatalf("after reopening: %+v %v", k, ok)
	}
	if k, ok := again.Lookup(Hash(secret2)); !ok || k.Revoked.IsZero() {
		t.Fatalf("revoked key after reopening: %+v %v", k, ok)
	}
	if l := again.List(); len(l) != 1 || l[0].ID != id {
		t.Fatalf("list after reopening: %+v", l)
	}
}

// FuzzSubkeyBodies: no body makes the sub-key routes answer 5xx or panic;
// a key they accept works at once.
func FuzzSubkeyBodies(f *testing.F) {
	for _, s := range []string{`{"scopes":["inference"]}`, `{"name":"x","scopes":["mcp","agent"],"models":["a"],"rate_limit":{"requests_per_minute":1,"tokens_per_minute":2},"expires_in":5}`,
		`{"scopes":["admin"],"expires_at":"2999-01-01T00:00:00Z"}`, `{"scopes":null}`, `{`, `null`, `{"rate_limit":[]}`, `{"expires_in":1e99}`} {
		f.Add(s)
	}
	a := New(Config{AdminKey: "admin", Keys: NewMemStore(), Failures: NewFailLimiter(-1, 0, nil)})
	s := server(f, a)
	f.Fuzz(func(t *testing.T, body string) {
		st, _, b := call(t, "POST", s.URL+"/admin/api/subkeys", "admin", body)
		if st >= 500 {
			t.Fatalf("%q: %d %s", body, st, b)
		}
		if st == 201 {
			var d KeyDoc
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("%q: %s", body, b)
			}
			if st, _, b := call(t, "DELETE", s.URL+"/admin/api/subkeys/"+d.ID, "admin", ""); st != 200 {
				t.Fatalf("delete %s: %d %s", d.ID, st, b)
			}
		}
	})
}
