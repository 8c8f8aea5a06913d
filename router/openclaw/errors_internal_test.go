package openclaw

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// TestStoreErrorStatus: every store error a client can cause or wait out
// has its own status (a 5xx only when the client should retry).
func TestStoreErrorStatus(t *testing.T) {
	cases := []struct {
		err        error
		status     int
		code       string
		retryAfter int
	}{
		{ErrNotFound, http.StatusNotFound, "session_not_found", 0},
		{ErrConflict, http.StatusConflict, "turn_in_progress", 0},
		{ErrCapacity, http.StatusTooManyRequests, "session_cap_reached", 1},
		{ErrUnknownToolCall, http.StatusBadRequest, "unknown_tool_call_id", 0},
		{ErrToolCallAnswered, http.StatusBadRequest, "tool_call_answered", 0},
		{ErrUnavailable, http.StatusServiceUnavailable, "sessions_unavailable", 2},
	}
	for _, c := range cases {
		e := storeError(fmt.Errorf("%w: detail", c.err), "s1")
		if e.Status != c.status || e.Code != c.code || e.RetryAfter != c.retryAfter {
			t.Errorf("%v: status %d code %q retry-after %d, want %d %q %d", c.err, e.Status, e.Code, e.RetryAfter, c.status, c.code, c.retryAfter)
		}
	}
	if e := storeError(errors.New("disk on fire"), "s1"); e.Status != http.StatusInternalServerError {
		t.Errorf("an unexpected error: status %d, want 500", e.Status)
	}
}
