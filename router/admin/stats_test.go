package admin

import (
	"testing"

	"fusion/router/metrics"
)

// TestTotalPercentiles: the cluster total's percentiles are those of every
// node's samples together; a node that sent no samples bounds them with
// its own.
func TestTotalPercentiles(t *testing.T) {
	withSamples := func(ttft, latency []float64) NodeStats {
		return NodeStats{Samples: &LatencySamples{TTFT: ttft, Latency: latency},
			TTFT: metrics.PercentilesOf(ttft), Latency: metrics.PercentilesOf(latency)}
	}
	tests := []struct {
		name          string
		nodes         map[string]NodeStats
		ttft, latency metrics.Percentiles
	}{
		{"merged", map[string]NodeStats{"a": withSamples([]float64{1, 2, 3, 4}, nil), "b": withSamples([]float64{10}, nil)},
			metrics.Percentiles{P50: 3, P95: 10, P99: 10, Samples: 5}, metrics.Percentiles{}},
		{"latency merged too", map[string]NodeStats{"a": withSamples(nil, []float64{5, 1}), "b": withSamples(nil, []float64{2, 3, 4})},
			metrics.Percentiles{}, metrics.Percentiles{P50: 3, P95: 5, P99: 5, Samples: 5}},
		{"a node without samples bounds the total", map[string]NodeStats{"a": withSamples([]float64{1, 2, 3}, nil),
			"old": {TTFT: metrics.Percentiles{P50: 7, P95: 8, P99: 9, Samples: 4}}},
			metrics.Percentiles{P50: 7, P95: 8, P99: 9, Samples: 7}, metrics.Percentiles{}},
		{"no samples anywhere", map[string]NodeStats{"a": {}}, metrics.Percentiles{}, metrics.Percentiles{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := total(tc.nodes)
			if got.TTFT != tc.ttft || got.Latency != tc.latency {
				t.Errorf("ttft %+v latency %+v, want %+v %+v", got.TTFT, got.Latency, tc.ttft, tc.latency)
			}
		})
	}
}
