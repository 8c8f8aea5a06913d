package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"fusion/internal/tracing"
	"fusion/internal/tracing/otlptest"
	"fusion/node"
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
	a := nodetest.Start(t, nodetest.Options{ModelsDir: t.TempDir(), Cluster: nodetest.Member("a", 1, nil), Tracing: tc})
	b := nodetest.Start(t, nodetest.Options{ModelsDir: nodetest.Models(t), Cluster: nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()}), Tracing: tc})

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

// TestTracePipeline: a model in three stages on three nodes that export to
// one OTLP receiver; a chat request with a client's traceparent, sent to
// the first stage. Each later stage records a span of the sequence in the
// request's trace: the second stage's is a child of a span on the first
// stage's node, the third stage's a child of the second's, and each counts
// the steps and positions the sequence took there.
func TestTracePipeline(t *testing.T) {
	recv := otlptest.Start(t)
	tc := tracing.Config{Endpoint: "grpc://" + recv.Addr, BatchTimeout: 100 * time.Millisecond}
	models := deepModels(t)
	nodes := map[string]*node.Node{}
	opts := func(c node.ClusterConfig) nodetest.Options {
		return nodetest.Options{APIKey: "k", ModelsDir: models, Backend: "cpu", Cluster: c, Tracing: tc}
	}
	nodes["a"] = nodetest.Start(t, opts(nodetest.Member("a", 3, nil)))
	seed := []string{nodes["a"].Cluster().GossipAddr()}
	for _, id := range []string{"b", "c"} {
		nodes[id] = nodetest.Start(t, opts(nodetest.Member(id, 3, seed)))
	}
	waitUntil(t, 15*time.Second, "a leader known to all three", func() bool {
		l := nodes["a"].Cluster().Leader()
		return l != "" && nodes["b"].Cluster().Leader() == l && nodes["c"].Cluster().Leader() == l
	})
	putPlacement(t, nodes["c"], `{"replicas":1,"stages":3}`)
	p := readyPipeline(t, nodes["a"], 3, 30*time.Second)
	first := nodes[p.Stages[0].Node]

	const clientTrace, clientSpan = "5cf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	const maxTokens = 4
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"trace me"}],"max_tokens":%d,"temperature":0}`, deepModel, maxTokens)
	var answer struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, first.URL()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(raw, &answer); err != nil || answer.Usage.CompletionTokens < 1 {
				t.Fatalf("answer %s: %v", raw, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chat on the first stage: %d %s", resp.StatusCode, raw)
		}
	}
	for _, n := range nodes {
		if err := n.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	byID := map[string]otlptest.Span{}
	var stageSpans []otlptest.Span
	for _, s := range recv.Spans() {
		if s.TraceID != clientTrace {
			continue
		}
		byID[s.SpanID] = s
		if s.Name == "pipeline stage" {
			stageSpans = append(stageSpans, s)
		}
	}
	var second, third []otlptest.Span
	for _, s := range stageSpans {
		switch s.Node {
		case p.Stages[1].Node:
			second = append(second, s)
		case p.Stages[2].Node:
			third = append(third, s)
		default:
			t.Errorf("a stage span on %s, which holds no later stage of %+v", s.Node, p.Stages)
		}
	}
	if len(second) == 0 || len(third) != len(second) {
		t.Fatalf("stage spans: %d on the second stage (%s), %d on the third (%s); all spans: %+v", len(second), p.Stages[1].Node, len(third), p.Stages[2].Node, byID)
	}
	for _, s3 := range third {
		parent, ok := byID[s3.Parent]
		if !ok || parent.Name != "pipeline stage" || parent.Node != p.Stages[1].Node {
			t.Errorf("the third stage's span's parent is %+v, want the second stage's span", parent)
		}
		if s3.Attrs["fusion.pipeline.last"] != "true" || s3.Attrs["fusion.model"] != deepModel {
			t.Errorf("third stage span attributes %v", s3.Attrs)
		}
	}
	counted := false    // a span counts the answered request's steps and positions
	var counts [][2]int // every span's
	for _, s2 := range second {
		parent, ok := byID[s2.Parent]
		if !ok || parent.Node != p.Stages[0].Node {
			t.Errorf("the second stage's span's parent is %+v, want a span on the first stage %s", parent, p.Stages[0].Node)
		}
		if s2.Attrs["fusion.pipeline.last"] != "false" || s2.Attrs["fusion.pipeline.generation"] != fmt.Sprint(p.Generation) {
			t.Errorf("second stage span attributes %v", s2.Attrs)
		}
		// The prompt's prefill and a step per further token: every token
		// but the last went back through the stages (the last request's
		// span: retries before it may have made others).
		steps, _ := strconv.Atoi(s2.Attrs["fusion.pipeline.steps"])
		positions, _ := strconv.Atoi(s2.Attrs["fusion.pipeline.positions"])
		u := answer.Usage
		if steps >= u.CompletionTokens && positions == u.PromptTokens+u.CompletionTokens-1 {
			counted = true
		}
		counts = append(counts, [2]int{steps, positions})
		if s2.StartNano > s2.EndNano {
			t.Errorf("second stage span ends before it starts: %+v", s2)
		}
	}
	if u := answer.Usage; !counted {
		t.Errorf("no second stage span counts ≥ %d steps and %d positions (usage %+v): (steps, positions) %v", u.CompletionTokens, u.PromptTokens+u.CompletionTokens-1, u, counts)
	}
}
