package testenv

import (
	"context"
	"testing"
	"time"
)

// clientMargin is the time a client suite leaves before the test binary's
// deadline, so that its output is printed by the test that ran it rather
// than lost in go test's timeout panic.
const clientMargin = time.Minute

// clientDefault bounds a client suite when the test binary has no deadline.
const clientDefault = 15 * time.Minute

// ClientContext bounds an external client run (a Python or Node SDK suite,
// a CLI) by the test binary's own deadline less a margin, not by a fixed
// time: under load on a small machine a suite may need longer than it does
// on a quiet one, and only a hang should stop it.
func ClientContext(t testing.TB) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(clientDefault)
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := tt.Deadline(); ok {
			deadline = d.Add(-clientMargin)
		}
	}
	return context.WithDeadline(context.Background(), deadline)
}
