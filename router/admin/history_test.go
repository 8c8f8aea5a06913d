package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"fusion/router/metrics"
)

// TestHistory: the node's points carry its figures and the request rate
// between points, the ring keeps the last hour, and the route serves them.
func TestHistory(t *testing.T) {
	m := metrics.New(nil)
	h := New(Config{Self: "n1", Metrics: m, Engine: func() EngineFigures {
		return EngineFigures{RAMTotal: 1000, RAMFree: 400, KVBytes: 7}
	}})
	t0 := time.Unix(1_000_000, 0)
	h.RecordHistory(t0)
	for range 5 {
		m.Begin("demo").End(metrics.OK, 3, 2)
	}
	h.RecordHistory(t0.Add(HistoryEvery))

	rec := httptest.NewRecorder()
	h.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/api/stats/history", nil))
	var out HistoryAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	pts := out.Nodes["n1"]
	if len(pts) != 2 || out.EverySeconds != HistoryEvery.Seconds() {
		t.Fatalf("points %+v every %v", pts, out.EverySeconds)
	}
	if p := pts[1]; p.Requests != 5 || p.RequestsPerSec != 5/HistoryEvery.Seconds() || p.RAMUsed != 600 || p.KV != 7 || p.Time != t0.Add(HistoryEvery).Unix() {
		t.Errorf("second point %+v", p)
	}
	if pts[0].RequestsPerSec != 0 {
		t.Errorf("first point's rate %v, want 0", pts[0].RequestsPerSec)
	}

	// A session clear: the rate does not go negative.
	m.ClearSession()
	h.RecordHistory(t0.Add(2 * HistoryEvery))
	for i := 3; i < historyPoints+10; i++ {
		h.RecordHistory(t0.Add(time.Duration(i) * HistoryEvery))
	}
	h.hist.mu.Lock()
	defer h.hist.mu.Unlock()
	if n := len(h.hist.points); n != historyPoints {
		t.Errorf("%d points kept, want %d (an hour)", n, historyPoints)
	}
	for _, p := range h.hist.points {
		if p.RequestsPerSec < 0 {
			t.Errorf("negative rate %+v", p)
		}
	}
	if last := h.hist.points[len(h.hist.points)-1]; last.Time != t0.Add(time.Duration(historyPoints+9)*HistoryEvery).Unix() {
		t.Errorf("the newest point is %d", last.Time)
	}
}
