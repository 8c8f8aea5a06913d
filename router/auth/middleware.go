package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"
)

// ScopeOf is the scope a route needs. Unknown paths need admin, so a new
// route is closed to sub-keys until it is given a scope here.
func ScopeOf(method, path string) Scope {
	under := func(prefix string) bool {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	switch {
	case under("/admin") || path == "/metrics":
		if method == http.MethodGet || method == http.MethodHead {
			return ScopeAdminRead
		}
		return ScopeAdmin
	case under("/v1/embeddings"), path == "/v1/rerank", path == "/rerank":
		return ScopeEmbeddings
	case under("/v1/audio"):
		return ScopeAudio
	case under("/v1/images"):
		return ScopeImages
	case under("/v1/mcp") || under("/mcp"):
		return ScopeMCP
	case under("/v1/openclaw"):
		return ScopeAgent
	case under("/v1/chat"), under("/v1/completions"), under("/v1/messages"), under("/v1/responses"),
		under("/v1/models"), under("/v1/count_tokens"), path == "/tokenize", path == "/detokenize":
		return ScopeInference
	}
	return ScopeAdmin
}

// Denial is a refusal the middleware answers in the route's dialect.
type Denial struct {
	Status     int    // 401, 403 or 429
	Code       string // invalid_api_key, key_in_query, insufficient_scope, model_not_allowed, rate_limit_exceeded, too_many_failures
	Message    string
	RetryAfter int // seconds, for 429
}

// Deny writes a Denial in a dialect's error shape.
type Deny func(w http.ResponseWriter, d Denial)

// Config configures an Authenticator.
type Config struct {
	// AdminKey is the node's key: every route. Empty turns authentication
	// off (the node then listens on loopback only, or was told
	// --insecure-no-auth).
	AdminKey string
	// Keys holds the sub-keys (nil: none).
	Keys Store
	// Limits counts and limits the sub-keys' use (nil: a local one).
	Limits *Limiter
	// Failures limits failed attempts per client address (nil: none).
	Failures *FailLimiter
	// Now is the clock for expiry (nil: time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Authenticator checks every request's key.
type Authenticator struct {
	cfg   Config
	admin [sha256.Size]byte
}

// New returns an authenticator.
func New(cfg Config) *Authenticator {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limits == nil {
		cfg.Limits = NewLimiter(cfg.Now)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Authenticator{cfg: cfg, admin: Hash(cfg.AdminKey)}
}

// Enabled reports whether keys are checked.
func (a *Authenticator) Enabled() bool { return a.cfg.AdminKey != "" }

// Limits is the rate limiter (its Usage is each key's use).
func (a *Authenticator) Limits() *Limiter { return a.cfg.Limits }

// Keys is the sub-key store (nil: none).
func (a *Authenticator) Keys() Store { return a.cfg.Keys }

type ctxKey struct{}

// Principal is who a request authenticated as.
type Principal struct {
	Admin bool // the node's key
	Key   Key  // the sub-key, when not Admin
}

// FromContext returns the request's principal (nil: authentication off).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}

// queryKeyParams are query parameters that look like a credential.
var queryKeyParams = []string{"api_key", "apikey", "api-key", "key", "access_token", "token", "x-api-key", "authorization"}

// Middleware checks the key of every request, denying in deny's shape.
func (a *Authenticator) Middleware(deny Deny) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if !a.Enabled() {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, d := a.check(r)
			if d != nil {
				deny(w, *d)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, p)))
		})
	}
}

// check authenticates and authorizes r.
func (a *Authenticator) check(r *http.Request) (*Principal, *Denial) {
	q := r.URL.Query()
	for name := range q {
		for _, k := range queryKeyParams {
			if strings.EqualFold(name, k) {
				return nil, &Denial{Status: http.StatusUnauthorized, Code: "key_in_query",
					Message: fmt.Sprintf("API keys are not accepted in the query string (parameter '%s'): URLs end up in logs and histories. Send the key as 'Authorization: Bearer KEY' or in the 'x-api-key' header.", name)}
			}
		}
	}
	addr := clientAddr(r.RemoteAddr)
	if blocked, wait := a.cfg.Failures.Blocked(addr); blocked {
		return nil, &Denial{Status: http.StatusTooManyRequests, Code: "too_many_failures", RetryAfter: wait,
			Message: "Too many failed authentication attempts from this address; try again later."}
	}
	secret, ok := presentedKey(r)
	if !ok {
		return nil, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key",
			Message: "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' (or in the 'x-api-key' header)."}
	}
	h := Hash(secret)
	if equalHash(h, a.admin) {
		return &Principal{Admin: true}, nil
	}
	var k Key
	found := false
	if a.cfg.Keys != nil {
		// The map lookup is by hash, which tells an attacker nothing of
		// a secret; the stored hash is then compared in constant time.
		k, found = a.cfg.Keys.Lookup(h)
		found = found && equalHash(h, k.Hash)
	}
	now := a.cfg.Now()
	switch {
	case !found:
		a.cfg.Failures.Fail(addr)
		a.cfg.Logger.Debug("auth: unknown key", "remote", addr, "path", r.URL.Path)
		return nil, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "Incorrect API key provided."}
	case !k.Revoked.IsZero():
		a.cfg.Failures.Fail(addr)
		return nil, &Denial{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: fmt.Sprintf("The API key %s was revoked.", k.ID)}
	case k.Expired(now):
		return nil, &Denial{Status: http.StatusUnauthorized, Code: "expired_api_key",
			Message: fmt.Sprintf("The API key %s expired at %s.", k.ID, k.Expires.UTC().Format(time.RFC3339))}
	}
	scope := ScopeOf(r.Method, r.URL.Path)
	if !k.Has(scope) {
		return nil, &Denial{Status: http.StatusForbidden, Code: "insufficient_scope",
			Message: fmt.Sprintf("The API key %s lacks the '%s' scope that %s %s needs.", k.ID, scope, r.Method, r.URL.Path)}
	}
	if len(k.Models) > 0 && r.Method == http.MethodPost {
		if model, ok := bodyModel(r); ok && !k.AllowsModel(model) {
			return nil, &Denial{Status: http.StatusForbidden, Code: "model_not_allowed",
				Message: fmt.Sprintf("The API key %s may not use the model '%s'.", k.ID, model)}
		}
	}
	if ok, wait := a.cfg.Limits.Admit(&k); !ok {
		return nil, &Denial{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", RetryAfter: wait,
			Message: fmt.Sprintf("Rate limit reached for the API key %s (%d requests, %d tokens per minute).", k.ID, k.RequestsPerMin, k.TokensPerMin)}
	}
	return &Principal{Key: k}, nil
}

// bodyModel reads the "model" of a JSON body and puts the body back. A
// body that is not JSON or has no string model tells nothing (the
// handler answers it).
func bodyModel(r *http.Request) (string, bool) {
	if r.Body == nil {
		return "", false
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return "", false
		}
	}
	// The body is already capped by the router's size limit.
	b, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
	if err != nil {
		return "", false
	}
	var v struct {
		Model json.RawMessage `json:"model"`
	}
	if json.Unmarshal(b, &v) != nil {
		return "", false
	}
	var m string
	if json.Unmarshal(v.Model, &m) != nil {
		return "", false
	}
	return m, true
}

// errReader replays a read error (a body over the limit) after the bytes.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// presentedKey is the key of a request: a bearer token, else x-api-key.
func presentedKey(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(tok) != "" {
			return strings.TrimSpace(tok), true
		}
		return "", false
	}
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k, true
	}
	return "", false
}

// CountTokens records tokens used by the request of ctx against its key
// (a no-op for the admin key and without authentication).
func (a *Authenticator) CountTokens(ctx context.Context, n int64) {
	if p := FromContext(ctx); p != nil && !p.Admin {
		a.cfg.Limits.AddTokens(p.Key.ID, n)
	}
}
