package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"fusion/router/auth"
	"fusion/router/openai"
)

//go:embed static
var static embed.FS

// Defaults of the session limits.
const (
	DefaultSessionTTL  = 12 * time.Hour
	DefaultMaxSessions = 1000
	// maxSignInBody bounds the sign-in body ({"key": "..."}).
	maxSignInBody = 4 << 10
	// maxCookie bounds a session cookie's value (ours are 43 bytes): a
	// longer one is no session and is not hashed or looked up.
	maxCookie = 256
	// CSRFHeader carries the session's CSRF token on state-changing
	// requests.
	CSRFHeader = "X-CSRF-Token"
)

// Options are the panel's limits.
type Options struct {
	// SessionTTL is how long a sign-in lasts (0: DefaultSessionTTL).
	SessionTTL time.Duration
	// MaxSessions bounds the live sessions (0: DefaultMaxSessions) of
	// the node, or of the whole cluster when the sessions are replicated;
	// past it the session that expires first ends.
	MaxSessions int
	// CookieDomain, when set, is the session cookie's Domain, so that a
	// browser sends it to every member under that domain (a.lan.example
	// and b.lan.example with "lan.example"): without it a browser keeps a
	// cookie for the host that set it (ports aside).
	CookieDomain string
}

// cookieDomain is a host name (labels of letters, digits and hyphens),
// optionally with a leading dot.
var cookieDomain = regexp.MustCompile(`^\.?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)

// CheckCookieDomain says why a value cannot be Options.CookieDomain.
func CheckCookieDomain(d string) error {
	if !cookieDomain.MatchString(d) || len(d) > 253 {
		return errors.New("not a domain name (e.g. lan.example: no scheme, port or path)")
	}
	return nil
}

// Config is what the panel needs.
type Config struct {
	// AdminKey is the node's admin key (empty: authentication is off and
	// the panel needs no sign-in).
	AdminKey string
	// Failures limits failed sign-ins per client address, shared with the
	// API's key checks (nil: no limit).
	Failures *auth.FailLimiter
	// Sessions keeps the sign-ins (nil: in memory, this node only). A
	// cluster gives its replicated store: a session is then good on every
	// node, and its cookie is named the same on all of them.
	Sessions SessionStore
	// NodeID names the session cookie of a node whose sessions are its
	// own, so the panels of several nodes on one host (cookies ignore
	// ports) do not overwrite each other's cookies.
	NodeID  string
	Options Options
	Now     func() time.Time
	Logger  *slog.Logger
}

// Panel serves /admin/ and turns a signed-in browser's requests into
// admin-key requests for the rest of the node.
type Panel struct {
	cfg      Config
	sessions SessionStore
	cookie   string
	files    fs.FS
	index    []byte
}

// cookieUnsafe are the characters a cookie name may not hold.
var cookieUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// New makes the panel.
func New(cfg Config) *Panel {
	if cfg.Options.SessionTTL <= 0 {
		cfg.Options.SessionTTL = DefaultSessionTTL
	}
	if cfg.Options.MaxSessions <= 0 {
		cfg.Options.MaxSessions = DefaultMaxSessions
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic("dashboard: embedded files: " + err.Error()) // the embed pattern guarantees the directory
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic("dashboard: embedded index.html: " + err.Error())
	}
	cookie := "fusion_panel"
	if id := cookieUnsafe.ReplaceAllString(cfg.NodeID, "_"); id != "" && cfg.Sessions == nil {
		cookie += "_" + id
	}
	if cfg.Sessions == nil {
		cfg.Sessions = NewMemSessions()
	}
	return &Panel{cfg: cfg, sessions: cfg.Sessions, cookie: cookie, files: files, index: index}
}

// current is the live session of the request's cookie, and the cookie's
// secret.
func (p *Panel) current(r *http.Request) (s session, secret string, ok bool) {
	c, err := r.Cookie(p.cookie)
	if err != nil || c.Value == "" || len(c.Value) > maxCookie {
		return session{}, "", false
	}
	exp, ok := p.sessions.Lookup(r.Context(), cookieHash(c.Value), p.cfg.Now())
	if !ok {
		return session{}, "", false
	}
	return session{csrf: csrfOf(c.Value), expires: exp}, c.Value, true
}

// CookieName is the name of this node's session cookie.
func (p *Panel) CookieName() string { return p.cookie }

// owns reports whether path is the panel's: /admin and below, but for the
// admin API.
func owns(path string) bool {
	if path == "/admin" {
		return true
	}
	return strings.HasPrefix(path, "/admin/") && path != "/admin/api" && !strings.HasPrefix(path, "/admin/api/")
}

// Wrap serves the panel's paths and hands every other request to next,
// carrying the admin key when it comes from a signed-in browser.
func (p *Panel) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if owns(r.URL.Path) {
			p.serve(w, r)
			return
		}
		if p.cfg.AdminKey == "" || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
			next.ServeHTTP(w, r)
			return
		}
		s, _, ok := p.current(r)
		if !ok {
			next.ServeHTTP(w, r) // the API answers its own 401
			return
		}
		if e := checkUnsafe(r, s); e != nil {
			openai.WriteError(w, e)
			return
		}
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+p.cfg.AdminKey)
		next.ServeHTTP(w, r)
	})
}

// safeMethod: the methods that change nothing, which need no CSRF token.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkUnsafe refuses a state-changing request of a session that lacks
// the session's CSRF token or comes from another origin.
func checkUnsafe(r *http.Request, s session) *openai.Error {
	if safeMethod(r.Method) {
		return nil
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return &openai.Error{Status: http.StatusForbidden, Type: openai.TypeInvalidRequest, Code: "csrf_failed",
			Message: "The request's Origin is not this node's: cross-site requests are refused."}
	}
	if !sameToken(r.Header.Get(CSRFHeader), s.csrf) {
		return &openai.Error{Status: http.StatusForbidden, Type: openai.TypeInvalidRequest, Code: "csrf_failed",
			Message: "A state-changing request of a panel session needs the session's CSRF token in the " + CSRFHeader + " header."}
	}
	return nil
}

// sameOrigin reports whether an Origin header names host.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, host)
}

// securityHeaders are set on every answer of the panel: no inline script
// or style, nothing from elsewhere, never framed.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "+
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// serve answers the panel's paths.
func (p *Panel) serve(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	switch {
	case r.URL.Path == "/admin/session":
		p.session(w, r)
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		openai.WriteError(w, openai.MethodNotAllowed(r.Method, r.URL.Path))
	case r.URL.Path == "/admin":
		http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
	case strings.HasPrefix(r.URL.Path, "/admin/assets/"):
		p.asset(w, r)
	default:
		// Every other path is a page of the panel (history routes):
		// the one document, whose script renders the path.
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(p.index)
	}
}

// contentTypes of the embedded files.
var contentTypes = map[string]string{
	".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml", ".html": "text/html; charset=utf-8",
}

// asset serves an embedded file.
func (p *Panel) asset(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/admin/assets/")
	ct, known := contentTypes[path.Ext(name)]
	b, err := fs.ReadFile(p.files, "assets/"+name)
	if !known || err != nil || name != path.Clean(name) {
		openai.WriteError(w, openai.NotFound(r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// sessionDoc is the answer of /admin/session.
type sessionDoc struct {
	// Auth is false when the node checks no key (no sign-in needed).
	Auth      bool       `json:"auth"`
	SignedIn  bool       `json:"signed_in"`
	CSRFToken string     `json:"csrf_token,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// session serves /admin/session: GET says whether the browser is signed
// in (and gives back its CSRF token after a reload), POST signs in with
// the admin key, DELETE signs out.
func (p *Panel) session(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if p.cfg.AdminKey == "" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			openai.WriteError(w, &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Code: "auth_off",
				Message: "This node checks no API key: the panel needs no sign-in."})
			return
		}
		writeJSON(w, http.StatusOK, sessionDoc{Auth: false, SignedIn: true})
		return
	}
	cur, secret, signedIn := p.current(r)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		doc := sessionDoc{Auth: true, SignedIn: signedIn}
		if signedIn {
			doc.CSRFToken, doc.ExpiresAt = cur.csrf, &cur.expires
		}
		writeJSON(w, http.StatusOK, doc)
	case http.MethodPost:
		p.signIn(w, r)
	case http.MethodDelete:
		if !signedIn {
			openai.WriteError(w, openai.Unauthorized("Not signed in."))
			return
		}
		if e := checkUnsafe(r, cur); e != nil {
			openai.WriteError(w, e)
			return
		}
		if err := p.sessions.End(r.Context(), cookieHash(secret)); err != nil {
			p.cfg.Logger.Warn("panel: sign-out not stored", "err", err)
			openai.WriteError(w, storeDown("sign-out", err))
			return
		}
		http.SetCookie(w, p.newCookie(r, "", -1))
		p.cfg.Logger.Info("panel: signed out", "remote", clientAddr(r.RemoteAddr))
		writeJSON(w, http.StatusOK, sessionDoc{Auth: true})
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
		openai.WriteError(w, openai.MethodNotAllowed(r.Method, r.URL.Path))
	}
}

// signIn checks the admin key of the body and starts a session.
func (p *Panel) signIn(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		openai.WriteError(w, &openai.Error{Status: http.StatusForbidden, Type: openai.TypeInvalidRequest, Code: "csrf_failed",
			Message: "The request's Origin is not this node's: cross-site sign-ins are refused."})
		return
	}
	addr := clientAddr(r.RemoteAddr)
	if blocked, wait := p.cfg.Failures.Blocked(addr); blocked {
		openai.WriteError(w, &openai.Error{Status: http.StatusTooManyRequests, Type: openai.TypeRateLimit, Code: "too_many_failures", RetryAfter: wait,
			Message: "Too many failed authentication attempts from this address; try again later."})
		return
	}
	var body struct {
		Key *string `json:"key"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSignInBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		openai.WriteError(w, openai.TooLarge(maxSignInBody))
		return
	case err != nil:
		openai.WriteError(w, openai.InvalidRequest("key", "The sign-in body could not be read."))
		return
	}
	if json.Unmarshal(raw, &body) != nil || body.Key == nil || *body.Key == "" {
		openai.WriteError(w, openai.InvalidRequest("key", "Send the admin key as {\"key\": \"...\"}."))
		return
	}
	if !sameToken(*body.Key, p.cfg.AdminKey) {
		p.cfg.Failures.Fail(addr)
		p.cfg.Logger.Info("panel: sign-in refused", "remote", addr)
		openai.WriteError(w, openai.Unauthorized("Incorrect admin key."))
		return
	}
	secret, now := token(), p.cfg.Now()
	expires := now.Add(p.cfg.Options.SessionTTL)
	if err := p.sessions.Create(r.Context(), cookieHash(secret), now, expires, p.cfg.Options.MaxSessions); err != nil {
		p.cfg.Logger.Warn("panel: sign-in not stored", "err", err)
		openai.WriteError(w, storeDown("sign-in", err))
		return
	}
	http.SetCookie(w, p.newCookie(r, secret, int(p.cfg.Options.SessionTTL/time.Second)))
	p.cfg.Logger.Info("panel: signed in", "remote", addr)
	writeJSON(w, http.StatusOK, sessionDoc{Auth: true, SignedIn: true, CSRFToken: csrfOf(secret), ExpiresAt: &expires})
}

// storeDown is the 503 of a sign-in or sign-out the session store could
// not record (a cluster without a leader).
func storeDown(what string, err error) *openai.Error {
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "sessions_unavailable", RetryAfter: 1,
		Message: "The " + what + " could not be recorded (" + err.Error() + "); try again."}
}

// newCookie is the session cookie (maxAge < 0 deletes it). Its path is
// / because the panel calls /v1 routes (the chat) as well as /admin/api.
func (p *Panel) newCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: p.cookie, Value: value, Path: "/", Domain: p.cfg.Options.CookieDomain, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// clientAddr is the host of a remote address (proxies' headers are not
// trusted), as the API's failed-attempt limit counts it.
func clientAddr(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v) // sessionDoc always marshals
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
