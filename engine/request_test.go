package engine

import "testing"

func TestPriorityOf(t *testing.T) {
	for tag, want := range map[string]Priority{"": PriorityBatch, "openclaw": PriorityBatch, "claude_code": PriorityRealtime, "background": PriorityBackground} {
		if p, ok := PriorityOf(tag); !ok || p != want {
			t.Errorf("PriorityOf(%q) = %v, %v; want %v", tag, p, ok, want)
		}
	}
	if _, ok := PriorityOf("urgent"); ok {
		t.Error("PriorityOf(urgent) accepted")
	}
}
