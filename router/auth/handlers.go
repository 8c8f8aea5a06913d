package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/router/openai"
	"fusion/router/wire"
)

// Limits of the sub-key routes.
const (
	DefaultMaxKeys = 10000 // live sub-keys at most
	maxNameLen     = 128
	maxModels      = 256
	maxModelLen    = 256
	maxRate        = 1_000_000_000
)

// Routes serves /admin/api/subkeys (the admin middleware in front).
type Routes struct {
	a       *Authenticator
	maxKeys int
}

// NewRoutes returns the sub-key routes over a's store; maxKeys bounds
// the live keys (0: DefaultMaxKeys).
func NewRoutes(a *Authenticator, maxKeys int) *Routes {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return &Routes{a: a, maxKeys: maxKeys}
}

// Mount adds the routes to r.
func (h *Routes) Mount(r chi.Router) {
	r.Get("/admin/api/subkeys", h.list)
	r.Post("/admin/api/subkeys", h.create)
	r.Delete("/admin/api/subkeys/{id}", h.revoke)
}

// RateLimit is a key's limits in JSON.
type RateLimit struct {
	RequestsPerMinute int64 `json:"requests_per_minute"`
	TokensPerMinute   int64 `json:"tokens_per_minute"`
}

// KeyDoc is a sub-key in the API: Key (the secret) only in the answer
// that creates it.
type KeyDoc struct {
	ID        string    `json:"id"`
	Object    string    `json:"object"`
	Name      string    `json:"name"`
	Key       string    `json:"key,omitempty"`
	Prefix    string    `json:"prefix"`
	Scopes    []Scope   `json:"scopes"`
	Models    []string  `json:"models"`
	RateLimit RateLimit `json:"rate_limit"`
	CreatedAt string    `json:"created_at"`
	ExpiresAt *string   `json:"expires_at"`
	Expired   bool      `json:"expired"`
	Usage     *Counts   `json:"usage,omitempty"`
}

func doc(k Key, now time.Time) KeyDoc {
	d := KeyDoc{ID: k.ID, Object: "api_key", Name: k.Name, Prefix: k.Prefix, Scopes: k.Scopes, Models: k.Models,
		RateLimit: RateLimit{k.RequestsPerMin, k.TokensPerMin}, CreatedAt: k.Created.UTC().Format(time.RFC3339), Expired: k.Expired(now)}
	if d.Models == nil {
		d.Models = []string{}
	}
	if !k.Expires.IsZero() {
		s := k.Expires.UTC().Format(time.RFC3339)
		d.ExpiresAt = &s
	}
	return d
}

func (h *Routes) list(w http.ResponseWriter, r *http.Request) {
	keys, now := h.store().List(), h.a.cfg.Now()
	usage := h.a.cfg.Limits.Usage()
	out := make([]KeyDoc, 0, len(keys))
	for _, k := range keys {
		d := doc(k, now)
		u := usage[k.ID]
		d.Usage = &u
		out = append(out, d)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// createRequest is the body of POST /admin/api/subkeys.
type createRequest struct {
	Name      string     `json:"name"`
	Scopes    []string   `json:"scopes"`
	Models    []string   `json:"models"`
	RateLimit *RateLimit `json:"rate_limit"`
	ExpiresAt *string    `json:"expires_at"` // RFC 3339
	ExpiresIn *int64     `json:"expires_in"` // seconds from now
}

func bad(param, format string, a ...any) *openai.Error {
	return &openai.Error{Status: http.StatusBadRequest, Type: openai.TypeInvalidRequest, Param: param, Code: "invalid_value", Message: fmt.Sprintf(format, a...)}
}

// decodeCreate reads and checks a create body.
func decodeCreate(r *http.Request, now time.Time) (createRequest, error) {
	var req createRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var (
			te *json.UnmarshalTypeError
			me *http.MaxBytesError
		)
		switch {
		case errors.As(err, &me):
			return req, openai.TooLarge(me.Limit)
		case errors.As(err, &te):
			return req, bad(te.Field, "Invalid type for '%s': expected %s.", te.Field, te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return req, bad(f, "Unknown field '%s' (known: name, scopes, models, rate_limit, expires_at, expires_in).", f)
		}
		return req, bad("", "The body is not a JSON object: %v.", err)
	}
	if dec.More() {
		return req, bad("", "The body holds more than one JSON value.")
	}
	if len(req.Name) > maxNameLen {
		return req, bad("name", "'name' is longer than %d bytes.", maxNameLen)
	}
	if len(req.Scopes) == 0 {
		return req, bad("scopes", "'scopes' must list at least one of %s.", scopeList())
	}
	seen := map[string]bool{}
	for i, s := range req.Scopes {
		if !ValidScope(s) {
			return req, bad(fmt.Sprintf("scopes[%d]", i), "Unknown scope '%s' (known: %s).", s, scopeList())
		}
		if seen[s] {
			return req, bad(fmt.Sprintf("scopes[%d]", i), "Scope '%s' is listed twice.", s)
		}
		seen[s] = true
	}
	if len(req.Models) > maxModels {
		return req, bad("models", "'models' lists more than %d models.", maxModels)
	}
	for i, m := range req.Models {
		if m == "" || len(m) > maxModelLen {
			return req, bad(fmt.Sprintf("models[%d]", i), "A model name must be 1 to %d bytes.", maxModelLen)
		}
	}
	if rl := req.RateLimit; rl != nil {
		if rl.RequestsPerMinute < 0 || rl.RequestsPerMinute > maxRate {
			return req, bad("rate_limit.requests_per_minute", "'rate_limit.requests_per_minute' must be 0 (no limit) to %d.", maxRate)
		}
		if rl.TokensPerMinute < 0 || rl.TokensPerMinute > maxRate {
			return req, bad("rate_limit.tokens_per_minute", "'rate_limit.tokens_per_minute' must be 0 (no limit) to %d.", maxRate)
		}
	}
	if req.ExpiresAt != nil && req.ExpiresIn != nil {
		return req, bad("expires_in", "Give 'expires_at' or 'expires_in', not both.")
	}
	if req.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339, *req.ExpiresAt)
		if err != nil {
			return req, bad("expires_at", "'expires_at' is not an RFC 3339 time (2026-01-02T15:04:05Z).")
		}
		if !t.After(now) {
			return req, bad("expires_at", "'expires_at' is in the past.")
		}
	}
	if req.ExpiresIn != nil && (*req.ExpiresIn <= 0 || *req.ExpiresIn > 100*365*24*3600) {
		return req, bad("expires_in", "'expires_in' must be 1 to %d seconds.", 100*365*24*3600)
	}
	return req, nil
}

func scopeList() string {
	s := make([]string, len(Scopes))
	for i, sc := range Scopes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}

func (h *Routes) create(w http.ResponseWriter, r *http.Request) {
	now := h.a.cfg.Now()
	req, err := decodeCreate(r, now)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	if n := len(h.store().List()); n >= h.maxKeys {
		openai.WriteError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Code: "too_many_keys",
			Message: fmt.Sprintf("This server keeps at most %d sub-keys; delete one first.", h.maxKeys)})
		return
	}
	id, secret := NewSecret()
	k := Key{ID: id, Name: req.Name, Prefix: secret[:len(KeyPrefix)+4], Hash: Hash(secret), Models: req.Models, Created: now}
	for _, s := range req.Scopes {
		k.Scopes = append(k.Scopes, Scope(s))
	}
	if req.RateLimit != nil {
		k.RequestsPerMin, k.TokensPerMin = req.RateLimit.RequestsPerMinute, req.RateLimit.TokensPerMinute
	}
	switch {
	case req.ExpiresAt != nil:
		k.Expires, _ = time.Parse(time.RFC3339, *req.ExpiresAt)
	case req.ExpiresIn != nil:
		k.Expires = now.Add(time.Duration(*req.ExpiresIn) * time.Second)
	}
	if err := h.store().Put(r.Context(), k); err != nil {
		h.a.cfg.Logger.Warn("auth: storing a sub-key failed", "id", id, "err", err)
		openai.WriteError(w, storeFailed(err))
		return
	}
	h.a.cfg.Logger.Info("auth: sub-key created", "id", id, "name", k.Name, "scopes", req.Scopes)
	d := doc(k, now)
	d.Key = secret
	writeJSON(w, http.StatusCreated, d)
}

func (h *Routes) revoke(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	err := h.store().Revoke(r.Context(), id, h.a.cfg.Now())
	if errors.Is(err, ErrNotFound) {
		openai.WriteError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Code: "key_not_found",
			Message: fmt.Sprintf("No sub-key '%s'.", id)})
		return
	}
	if err != nil {
		h.a.cfg.Logger.Warn("auth: revoking a sub-key failed", "id", id, "err", err)
		openai.WriteError(w, storeFailed(err))
		return
	}
	h.a.cfg.Logger.Info("auth: sub-key revoked", "id", id)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "api_key", "deleted": true})
}

// storeFailed is the 503 of a store that could not write (a cluster
// without a leader): the client may retry.
func storeFailed(err error) *openai.Error {
	return &openai.Error{Status: http.StatusServiceUnavailable, Type: openai.TypeUnavailable, Code: "store_unavailable", RetryAfter: 1,
		Message: fmt.Sprintf("The key store cannot take the change now: %v", err)}
}

func (h *Routes) store() Store { return h.a.cfg.Keys }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := wire.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
