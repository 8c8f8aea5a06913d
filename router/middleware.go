package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"fusion/router/anthropic"
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

// auth requires the API key, when one is set, as a bearer token or in
// x-api-key (the Anthropic dialect's header). Keys are compared in
// constant time over their SHA-256 digests, so neither content nor length
// leaks through timing. deny writes the 401 in the dialect's shape.
func auth(key string, deny func(w http.ResponseWriter, msg string)) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(key))
	return func(next http.Handler) http.Handler {
		if key == "" {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, ok := presentedKey(r)
			if !ok {
				deny(w, "You didn't provide an API key. Send it as 'Authorization: Bearer KEY' (or in the 'x-api-key' header).")
				return
			}
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				deny(w, "Incorrect API key provided.")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// openaiDeny answers an authentication failure in OpenAI's shape.
func openaiDeny(w http.ResponseWriter, msg string) { openai.WriteError(w, openai.Unauthorized(msg)) }

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
