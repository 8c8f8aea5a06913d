package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"fusion/router/auth"
)

// AuthOptions configures the authentication benchmark.
type AuthOptions struct {
	Keys     int           // sub-keys in the store
	Peers    int           // peers whose usage reports the limiter adds
	Duration time.Duration // time spent on each case
}

// DefaultAuthOptions is what make bench runs: 1,000 sub-keys, the usage
// of two peers (a three-node cluster), 2 s a case.
func DefaultAuthOptions() AuthOptions {
	return AuthOptions{Keys: 1000, Peers: 2, Duration: 2 * time.Second}
}

type authCase struct {
	P50ns    int64 `json:"p50_ns"`
	P99ns    int64 `json:"p99_ns"`
	AddedP50 int64 `json:"added_p50_ns"` // over the handler without the middleware
	AddedP99 int64 `json:"added_p99_ns"`
	Requests int   `json:"requests"`
}

// Auth measures what authentication and rate limiting add to one
// request, in process (no network): the router's middleware over a
// handler that does nothing, against the bare handler, with Keys
// sub-keys in the store and Peers' usage reports in the limiter. Cases:
// the admin key; a sub-key with a rate limit; a sub-key limited to some
// models (the body's model is read before the handler).
func Auth(ctx context.Context, o AuthOptions, stdout io.Writer) error {
	if o.Keys < 1 || o.Peers < 0 || o.Duration <= 0 {
		return optionErrorf("bench auth: --keys ≥ 1, --peers ≥ 0 and a positive --duration")
	}
	store := auth.NewMemStore()
	limits := auth.NewLimiter(nil)
	secrets := make([]string, o.Keys)
	limited := make([]string, o.Keys)
	now := time.Now()
	w := now.UnixNano() / int64(time.Minute)
	reports := make([]auth.Report, o.Peers)
	for p := range reports {
		reports[p] = auth.Report{}
	}
	for i := range o.Keys {
		id, secret := auth.NewSecret()
		k := auth.Key{ID: id, Hash: auth.Hash(secret), Scopes: []auth.Scope{auth.ScopeInference}, Created: now,
			RequestsPerMin: math.MaxInt32, TokensPerMin: math.MaxInt32}
		if i%2 == 1 {
			k.Models = []string{"other", "demo"}
			limited[i] = secret
		} else {
			secrets[i] = secret
		}
		if err := store.Put(ctx, k); err != nil {
			return err
		}
		for p := range reports {
			reports[p][id] = auth.KeyUsage{Window: w, Cur: auth.Counts{Requests: 10, Tokens: 1000}, Total: auth.Counts{Requests: 10}}
		}
	}
	for p, r := range reports {
		limits.SetPeer(fmt.Sprint("peer", p), r)
	}
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return s == "" })
	limited = slices.DeleteFunc(limited, func(s string) bool { return s == "" })
	a := auth.New(auth.Config{AdminKey: "bench-admin-key", Keys: store, Limits: limits,
		Failures: auth.NewFailLimiter(auth.DefaultMaxFailures, auth.DefaultFailureWindow, nil), Logger: slog.New(slog.DiscardHandler)})
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	guarded := a.Middleware(func(w http.ResponseWriter, d auth.Denial) { w.WriteHeader(d.Status) })(bare)
	body := `{"model":"demo","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 200) + `"}],"max_tokens":16}`

	run := func(h http.Handler, keys []string) ([]time.Duration, error) {
		var lat []time.Duration
		end := time.Now().Add(o.Duration)
		for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+keys[i%len(keys)])
			rec := httptest.NewRecorder()
			t := time.Now()
			h.ServeHTTP(rec, req)
			lat = append(lat, time.Since(t))
			if rec.Code != http.StatusNoContent {
				return nil, fmt.Errorf("bench auth: status %d", rec.Code)
			}
		}
		slices.Sort(lat)
		return lat, ctx.Err()
	}
	pct := func(lat []time.Duration, p float64) int64 { return int64(lat[int(float64(len(lat)-1)*p)]) }
	base, err := run(bare, []string{"x"})
	if err != nil {
		return err
	}
	res := map[string]any{"keys": o.Keys, "peers": o.Peers, "duration": o.Duration.String(),
		"what": "in-process: the auth middleware (hash, lookup, scope, model, sliding-window limit) over a no-op handler; added = minus the bare handler"}
	res["bare"] = authCase{P50ns: pct(base, .5), P99ns: pct(base, .99), Requests: len(base)}
	for _, c := range []struct {
		name string
		keys []string
	}{{"admin_key", []string{"bench-admin-key"}}, {"subkey_rate_limited", secrets}, {"subkey_models_and_rate", limited}} {
		lat, err := run(guarded, c.keys)
		if err != nil {
			return err
		}
		res[c.name] = authCase{P50ns: pct(lat, .5), P99ns: pct(lat, .99), AddedP50: pct(lat, .5) - pct(base, .5),
			AddedP99: pct(lat, .99) - pct(base, .99), Requests: len(lat)}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(b))
	return err
}
