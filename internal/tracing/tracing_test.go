package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"fusion/engine"
)

func TestEndpoints(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		off      bool
		bad      bool
	}{
		{endpoint: "", off: true},
		{endpoint: "127.0.0.1:4317"},
		{endpoint: "grpc://127.0.0.1:4317"},
		{endpoint: "grpcs://collector.example:4317"},
		{endpoint: "http://127.0.0.1:4318"},
		{endpoint: "https://collector.example/custom/v1/traces"},
		{endpoint: "ftp://x:1", bad: true},
		{endpoint: "grpc://", bad: true},
		{endpoint: "http://%zz", bad: true},
	} {
		tr, err := New(context.Background(), Config{Endpoint: tc.endpoint})
		switch {
		case tc.bad:
			if !errors.Is(err, ErrEndpoint) {
				t.Errorf("%q: %v, want ErrEndpoint", tc.endpoint, err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.endpoint, err)
		case tc.off != (tr == nil):
			t.Errorf("%q: tracer %v, off %v", tc.endpoint, tr, tc.off)
		}
		if tr != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			tr.Shutdown(ctx) // nothing buffered: returns at once
			cancel()
		}
	}
}

// TestOff: a nil Tracer adds nothing: the handler is the same, no gRPC
// options, no phases in a context.
func TestOff(t *testing.T) {
	var tr *Tracer
	h := http.NewServeMux()
	if got := tr.Middleware(h); got != http.Handler(h) {
		t.Errorf("Middleware wrapped the handler when off")
	}
	if tr.DialOptions() != nil || tr.ServerOptions() != nil {
		t.Errorf("gRPC options when off")
	}
	if engine.PhasesFrom(tr.WithPhases(context.Background())) != nil {
		t.Errorf("phases when off")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestHTTPExport: over OTLP/HTTP to a real HTTP receiver, a request's
// span and the phases a handler reports under it arrive in one trace.
func TestHTTPExport(t *testing.T) {
	var (
		mu    sync.Mutex
		names = map[string]string{} // span name → parent span id (hex)
		ids   = map[string]string{} // span name → span id
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name] = string(s.ParentSpanId)
					ids[s.Name] = string(s.SpanId)
				}
			}
		}
		mu.Unlock()
		b, _ = proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	}))
	defer srv.Close()
	tr, err := New(context.Background(), Config{Endpoint: srv.URL, NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	h := tr.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := engine.PhasesFrom(r.Context())
		if p == nil {
			t.Error("no phases in the request's context")
			return
		}
		now := time.Now()
		p.Phase(engine.PhaseQueue, now, now.Add(time.Millisecond))
		w.WriteHeader(http.StatusTeapot)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("status %d", rec.Code)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	root, ok := ids["POST /v1/chat/completions"]
	if !ok || names["POST /v1/chat/completions"] != "" || names["queue_wait"] != root {
		t.Errorf("spans: parents %q, ids %q", names, ids)
	}
}
