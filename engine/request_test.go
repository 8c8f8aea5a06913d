package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

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

func TestRetryAfterSeconds(t *testing.T) {
	for _, c := range []struct {
		err  error
		def  int
		want int
	}{
		{&OverloadedError{Reason: "full", RetryAfter: 1500 * time.Millisecond}, 1, 2},
		{fmt.Errorf("wrapped: %w", &OverloadedError{RetryAfter: 7 * time.Second}), 1, 7},
		{&OverloadedError{RetryAfter: time.Millisecond}, 5, 1},
		{&OverloadedError{}, 3, 3},
		{ErrOverloaded, 2, 2},
		{ErrOverloaded, 0, 1},
	} {
		if got := RetryAfterSeconds(c.err, c.def); got != c.want {
			t.Errorf("RetryAfterSeconds(%v, %d) = %d, want %d", c.err, c.def, got, c.want)
		}
	}
	if err := error(&OverloadedError{Reason: "x"}); !errors.Is(err, ErrOverloaded) || err.Error() != "server overloaded: x" {
		t.Errorf("OverloadedError: %v", err)
	}
}
