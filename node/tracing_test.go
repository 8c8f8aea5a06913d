package node_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"fusion/internal/tracing"
	"fusion/internal/tracing/otlptest"
	"fusion/node/nodetest"
)

// TestTraceAcrossNodes: two nodes export to one real OTLP/gRPC receiver;
// a chat request sent to a (which has no model) with a client's
// traceparent runs on b. One trace holds, linked parent to child: the
// client's span → a's HTTP server span → a's gRPC client span → b's gRPC
// server span → b's queue_wait, prefill and decode, which follow one
// another in time. The cluster's own gRPC traffic (stats streams, raft
// forwards) makes no spans.
func TestTraceAcrossNodes(t *testing.T) {
	recv := otlptest.Start(t)
	tc := tracing.Config{Endpoint: "grpc://" + recv.Addr, BatchTimeout: 100 * time.Millisecond}
	a := nodetest.Start(t, nodetest.Options{ModelsDir: t.TempDir(), Cluster: loopback("a", 1, nil), Tracing: tc})
	b := nodetest.Start(t, nodetest.Options{ModelsDir: nodetest.Models(t), Cluster: loopback("b", 0, []string{a.Cluster().GossipAddr()}), Tracing: tc})

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, a.URL()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && resp.Header.Get("X-Fusion-Node") == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a does not forward to b: %d %q", resp.StatusCode, resp.Header.Get("X-Fusion-Node"))
		}
	}
	// Stop flushes both exporters.
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	byID := map[string]otlptest.Span{}
	for _, s := range recv.Spans() {
		if s.TraceID != clientTrace {
			t.Errorf("a span outside the request's trace: %+v", s)
			continue
		}
		byID[s.SpanID] = s
	}
	// The last forwarded request's chain, from b's decode up.
	var decode otlptest.Span
	for _, s := range byID {
		if s.Name == "decode" && s.Node == "b" && (decode.SpanID == "" || s.StartNano > decode.StartNano) {
			decode = s
		}
	}
	if decode.SpanID == "" {
		t.Fatalf("no decode span from b in %d spans: %+v", len(byID), byID)
	}
	type want struct {
		name string
		node string
		kind tracepb.Span_SpanKind
	}
	chain := []want{
		{"decode", "b", tracepb.Span_SPAN_KIND_INTERNAL},
		{"fusion.engine.v1.Engine/Generate", "b", tracepb.Span_SPAN_KIND_SERVER},
		{"fusion.engine.v1.Engine/Generate", "a", tracepb.Span_SPAN_KIND_CLIENT},
		{"POST /v1/chat/completions", "a", tracepb.Span_SPAN_KIND_SERVER},
	}
	s := decode
	for i, w := range chain {
		if s.Name != w.name || s.Node != w.node || s.Kind != w.kind {
			t.Fatalf("span %d up the chain: %s on %s (%v), want %s on %s (%v)", i, s.Name, s.Node, s.Kind, w.name, w.node, w.kind)
		}
		if i == len(chain)-1 {
			break
		}
		p, ok := byID[s.Parent]
		if !ok {
			t.Fatalf("%s on %s: parent %s not received", s.Name, s.Node, s.Parent)
		}
		s = p
	}
	if s.Parent != clientSpan {
		t.Errorf("a's HTTP span's parent %q, want the client's %q", s.Parent, clientSpan)
	}
	if s.Attrs["fusion.request_id"] == "" {
		t.Errorf("the HTTP span has no request id: %v", s.Attrs)
	}
	// queue_wait, prefill and decode: siblings under b's server span, in
	// order.
	server := byID[decode.Parent]
	phases := map[string]otlptest.Span{}
	for _, x := range byID {
		if x.Parent == server.SpanID {
			phases[x.Name] = x
		}
	}
	q, p := phases["queue_wait"], phases["prefill"]
	if q.SpanID == "" || p.SpanID == "" {
		t.Fatalf("phases under b's server span: %v", phases)
	}
	if q.EndNano > p.StartNano || p.EndNano > decode.StartNano || q.StartNano > q.EndNano || decode.StartNano > decode.EndNano {
		t.Errorf("phases out of order: queue [%d,%d] prefill [%d,%d] decode [%d,%d]", q.StartNano, q.EndNano, p.StartNano, p.EndNano, decode.StartNano, decode.EndNano)
	}
}
