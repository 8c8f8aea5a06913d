package router

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/router/anthropic"
	"fusion/router/auth"
	"fusion/router/metrics"
	"fusion/router/openai"
	"fusion/router/requestid"
)

// requestID adopts the client's X-Request-Id when it is sane, else makes
// one, and echoes it in the answer.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestid.Valid(id) {
			id = "req_" + requestid.New()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(requestid.With(r.Context(), id)))
	})
}

// statusWriter records the status and size of an answer. Unwrap lets
// http.ResponseController reach the connection's Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// accessLog logs every request and counts it in the metrics, by route
// pattern (not raw path, to keep the label set small).
func accessLog(log *slog.Logger, m *metrics.Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			sw := &statusWriter{ResponseWriter: w}
			m.HTTPStart()
			defer func() {
				d := time.Since(start)
				status := sw.status
				if status == 0 {
					status = 499 // the client went away before any answer
				}
				route := "unmatched"
				if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
					route = rc.RoutePattern()
				}
				m.HTTPDone(route, r.Method, strconv.Itoa(status), d)
				level := slog.LevelInfo
				if route == "/health" || route == "/metrics" {
					level = slog.LevelDebug
				}
				log.LogAttrs(r.Context(), level, "http request",
					slog.String("request_id", requestid.From(r.Context())),
					slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route),
					slog.Int("status", status), slog.Int64("bytes", sw.bytes),
					slog.Duration("duration", d), slog.String("remote", r.RemoteAddr))
			}()
			next.ServeHTTP(sw, r)
		})
	}
}

// recoverer turns a panic in a handler into a logged 500 in the OpenAI
// shape (when nothing was written yet). It re-panics http.ErrAbortHandler,
// which net/http uses to abort a response on purpose.
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw, _ := w.(*statusWriter)
			defer func() {
				p := recover()
				if p == nil {
					return
				}
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("handler panic", "request_id", requestid.From(r.Context()), "path", r.URL.Path,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if sw == nil || sw.status == 0 {
					openai.WriteError(w, openai.Internal())
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// limitBody answers 413 to a body declared larger than limit, and caps the
// reading of any other body at limit (the decoders turn the overflow into
// a 413).
func limitBody(limit int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > limit {
				if anthropic.Wants(r) {
					anthropic.WriteError(w, anthropic.TooLarge(limit))
					return
				}
				openai.WriteError(w, openai.TooLarge(limit))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			next.ServeHTTP(w, r)
		})
	}
}

// openaiDeny answers an authentication failure in OpenAI's shape (the
// admin routes use it too).
func openaiDeny(w http.ResponseWriter, d auth.Denial) {
	typ := openai.TypeInvalidRequest
	if d.Status == http.StatusTooManyRequests {
		typ = openai.TypeRateLimit
	}
	openai.WriteError(w, &openai.Error{Status: d.Status, Type: typ, Code: d.Code, Message: d.Message, RetryAfter: d.RetryAfter})
}

// anthropicDeny answers an authentication failure in Anthropic's shape.
func anthropicDeny(w http.ResponseWriter, d auth.Denial) {
	typ := anthropic.TypeAuthentication
	switch d.Status {
	case http.StatusForbidden:
		typ = anthropic.TypePermission
	case http.StatusTooManyRequests:
		typ = anthropic.TypeRateLimit
	}
	anthropic.WriteError(w, &anthropic.Error{Status: d.Status, Type: typ, Message: d.Message, RetryAfter: d.RetryAfter})
}

// meterKeys names a sub-key's generations in the per-key stats and
// counts their tokens against its limit (the admin key has none).
func meterKeys(a *auth.Authenticator) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p := auth.FromContext(r.Context()); p != nil && !p.Admin {
				ctx := r.Context()
				r = r.WithContext(metrics.WithKey(ctx, p.Key.ID, func(n int64) { a.CountTokens(ctx, n) }))
			}
			next.ServeHTTP(w, r)
		})
	}
}
