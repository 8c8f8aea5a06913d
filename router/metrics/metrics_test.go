package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSnapshotAndPrometheus(t *testing.T) {
	m := New(func() EngineStats { return EngineStats{InFlight: 2, QueueDepth: 1, Cancelled: 3} })
	m.Rejected()
	ok := m.Begin("a")
	ok.FirstToken()
	ok.FirstToken() // once
	ok.End(OK, 10, 4)
	ok.End(Failed, 99, 99) // later calls do nothing
	c := m.Begin("a")
	c.End(Cancelled, 0, 2)
	active := m.Begin("b")
	m.HTTPStart()
	m.HTTPDone("/v1/models", "GET", "200", time.Millisecond)

	s := m.Snapshot()
	want := Snapshot{TotalRequests: 3, SuccessfulRequests: 1, FailedRequests: 2, CancelledRequests: 1,
		TotalTokensGenerated: 6, TotalTokensPrompt: 10, ActiveRequests: 1}
	if s.TotalRequests != want.TotalRequests || s.SuccessfulRequests != want.SuccessfulRequests || s.FailedRequests != want.FailedRequests ||
		s.CancelledRequests != want.CancelledRequests || s.TotalTokensGenerated != want.TotalTokensGenerated ||
		s.TotalTokensPrompt != want.TotalTokensPrompt || s.ActiveRequests != want.ActiveRequests {
		t.Errorf("snapshot = %+v", s)
	}
	if a := s.ModelStats["a"]; a != (ModelStats{Requests: 2, Failed: 1, Cancelled: 1, TokensGenerated: 6, TokensPrompt: 10}) {
		t.Errorf("model a = %+v", a)
	}
	if s.Engine != (EngineSnapshot{InFlight: 2, QueueDepth: 1, Cancelled: 3}) {
		t.Errorf("engine = %+v", s.Engine)
	}
	active.End(OK, 1, 1)

	expected := `
# HELP fusion_generation_requests_total Generation requests by model and outcome (ok, error, cancelled).
# TYPE fusion_generation_requests_total counter
fusion_generation_requests_total{model="",outcome="error"} 1
fusion_generation_requests_total{model="a",outcome="cancelled"} 1
fusion_generation_requests_total{model="a",outcome="ok"} 1
fusion_generation_requests_total{model="b",outcome="ok"} 1
# HELP fusion_engine_queue_depth Generations waiting for their turn in the engine.
# TYPE fusion_engine_queue_depth gauge
fusion_engine_queue_depth 1
# HELP fusion_http_requests_total HTTP requests by route, method and status code.
# TYPE fusion_http_requests_total counter
fusion_http_requests_total{code="200",method="GET",route="/v1/models"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(expected),
		"fusion_generation_requests_total", "fusion_engine_queue_depth", "fusion_http_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.ttft); n != 1 {
		t.Errorf("ttft series = %d", n)
	}
}
