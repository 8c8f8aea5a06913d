// Package otlptest is a real OTLP/gRPC trace receiver for tests: an
// in-process gRPC server implementing the collector's TraceService
// (go.opentelemetry.io/proto/otlp), keeping every span it is sent.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is a received span, flattened.
type Span struct {
	Name                    string
	TraceID, SpanID, Parent string // hex; Parent "" for a root
	Kind                    tracepb.Span_SpanKind
	Node                    string // the resource's fusion.node
	StartNano, EndNano      uint64
	Attrs                   map[string]string // string and integer (in decimal) attributes
}

// Receiver collects spans.
type Receiver struct {
	coltrace.UnimplementedTraceServiceServer
	Addr string // host:port it listens on

	mu    sync.Mutex
	spans []Span
}

// Start serves a receiver on 127.0.0.1:0 until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return r
}

// Export is the OTLP TraceService call.
func (r *Receiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		var node string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "fusion.node" {
				node = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Parent: hex.EncodeToString(s.ParentSpanId), Kind: s.Kind, Node: node,
					StartNano: s.StartTimeUnixNano, EndNano: s.EndTimeUnixNano, Attrs: map[string]string{}}
				for _, kv := range s.Attributes {
					switch v := kv.GetValue().GetValue().(type) {
					case *commonpb.AnyValue_StringValue:
						sp.Attrs[kv.Key] = v.StringValue
					case *commonpb.AnyValue_IntValue:
						sp.Attrs[kv.Key] = strconv.FormatInt(v.IntValue, 10)
					}
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}
