// Package tracing sends OpenTelemetry traces of a node's requests to an
// OTLP endpoint: a span per HTTP request, a client span per call to a
// peer over gRPC with the trace context in the call's metadata (so one
// trace spans the node that took the request and the node that ran it), a
// server span for the call on the peer, and the engine's queue wait,
// prefill and decode under whichever ran the generation, and, for a model
// sharded into stages, a span of each sequence on every later stage (the
// trace context travels in the pipeline's first step of the sequence).
//
// It is off unless an endpoint is given; off, a nil *Tracer adds nothing
// (no middleware, no interceptors, no context values).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"fusion/engine"
)

// Config configures the exporter.
type Config struct {
	// Endpoint is where spans go: grpc://host:port (OTLP/gRPC, plain),
	// grpcs://host:port (OTLP/gRPC over TLS), http://host:port or
	// https://host:port (OTLP/HTTP, path /v1/traces unless given), or a
	// bare host:port (OTLP/gRPC, plain). Empty: tracing off.
	Endpoint string
	// Service is the service.name of the spans (default "fusion");
	// NodeID and Version are resource attributes.
	Service, NodeID, Version string
	// SampleRatio is the share of new traces recorded (0: all); a trace
	// started elsewhere follows its parent's decision.
	SampleRatio float64
	// BatchTimeout is the longest a finished span waits before it is
	// sent (default 5s).
	BatchTimeout time.Duration
}

// DefaultBatchTimeout is Config.BatchTimeout's default.
const DefaultBatchTimeout = 5 * time.Second

// Tracer makes the spans of one node. A nil *Tracer is tracing off.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	prop propagation.TextMapPropagator
}

// ErrEndpoint is the error of an endpoint New cannot use.
var ErrEndpoint = errors.New("tracing: bad OTLP endpoint")

// New starts the exporter; an empty endpoint returns nil (off). The
// exporter connects lazily: a collector that is down loses spans, never
// requests.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	exp, err := exporter(ctx, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Service == "" {
		cfg.Service = "fusion"
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = DefaultBatchTimeout
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.Service)}
	if cfg.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.Version))
	}
	if cfg.NodeID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.NodeID), attribute.String("fusion.node", cfg.NodeID))
	}
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
	if cfg.SampleRatio > 0 && cfg.SampleRatio < 1 {
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(cfg.BatchTimeout)),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sampler),
	)
	return &Tracer{tp: tp, tr: tp.Tracer("fusion"), prop: propagation.TraceContext{}}, nil
}

// exporter parses the endpoint and makes its OTLP exporter.
func exporter(ctx context.Context, endpoint string) (*otlptrace.Exporter, error) {
	if !strings.Contains(endpoint, "://") {
		endpoint = "grpc://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w %q: want grpc://host:port, grpcs://, http:// or https://", ErrEndpoint, endpoint)
	}
	switch u.Scheme {
	case "grpc", "grpcs":
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(u.Host)}
		if u.Scheme == "grpc" {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	case "http", "https":
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
		if u.Path != "" && u.Path != "/" {
			opts = append(opts, otlptracehttp.WithURLPath(u.Path))
		}
		if u.Scheme == "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("%w %q: scheme %q (want grpc, grpcs, http or https)", ErrEndpoint, endpoint, u.Scheme)
}

// Shutdown sends the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Middleware wraps h with a server span per request, named by method and
// path, continuing a trace the client sent (traceparent); the engine's
// phases of a generation run here are its children.
func (t *Tracer) Middleware(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tr.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(t.WithPhases(ctx)))
		span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status))
		if id := w.Header().Get("X-Request-Id"); id != "" {
			span.SetAttributes(attribute.String("fusion.request_id", id))
		}
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush passes streaming flushes through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WithPhases returns ctx with an engine.Phases that records the engine's
// phases as children of the span in ctx (ctx as is when off or when ctx
// has no recording span).
func (t *Tracer) WithPhases(ctx context.Context) context.Context {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	return engine.WithPhases(ctx, phases{t: t, parent: ctx})
}

type phases struct {
	t      *Tracer
	parent context.Context
}

func (p phases) Phase(ph engine.Phase, start, end time.Time) {
	_, span := p.t.tr.Start(p.parent, string(ph), trace.WithTimestamp(start))
	span.End(trace.WithTimestamp(end))
}

// TraceParent is the W3C traceparent of the span the phases go under
// (engine.Traced): a sharded model's later stages make their spans of the
// sequence its children.
func (p phases) TraceParent() string {
	c := propagation.MapCarrier{}
	p.t.prop.Inject(p.parent, c)
	return c["traceparent"]
}

// StartRemoteChild starts a span under the span whose W3C traceparent is
// parent, for work that outlives any one call (a sequence on a later
// stage of a sharded model lives across the steps of a long stream). It
// returns the new span's traceparent and the function that ends it with
// integer attributes; an invalid parent or tracing off gives "" and nil.
// Its signature is cluster/pipeline's StartSpan.
func (t *Tracer) StartRemoteChild(parent, name string, attrs map[string]string) (string, func(map[string]int64)) {
	if t == nil {
		return "", nil
	}
	ctx := t.prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": parent})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", nil
	}
	kv := make([]attribute.KeyValue, 0, len(attrs))
	for k, v := range attrs {
		kv = append(kv, attribute.String(k, v))
	}
	ctx, span := t.tr.Start(ctx, name, trace.WithAttributes(kv...))
	c := propagation.MapCarrier{}
	t.prop.Inject(ctx, c)
	return c["traceparent"], func(counts map[string]int64) {
		for k, v := range counts {
			span.SetAttributes(attribute.Int64(k, v))
		}
		span.End()
	}
}
