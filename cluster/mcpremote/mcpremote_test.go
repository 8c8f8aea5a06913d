package mcpremote

import (
	"errors"
	"testing"

	"fusion/mcp/host"
)

// TestErrorsCrossTheHop: each typed error of a peer's host is the same
// type on this side, so the router answers the same status as for a local
// call.
func TestErrorsCrossTheHop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"argument", &host.ArgumentError{Path: "arguments.b", Msg: "required field is missing"}, func(err error) bool {
			var ae *host.ArgumentError
			return errors.As(err, &ae) && ae.Path == "arguments.b" && ae.Msg == "required field is missing"
		}},
		{"not found", host.ErrToolNotFound, func(err error) bool { return errors.Is(err, host.ErrToolNotFound) }},
		{"not ready", host.ErrNotReady, func(err error) bool { return errors.Is(err, host.ErrNotReady) }},
		{"timeout", &host.CallError{Server: "s", Tool: "t", Timeout: true, Err: errors.New("deadline")}, func(err error) bool {
			var ce *host.CallError
			return errors.As(err, &ce) && ce.Timeout && ce.Server == "s" && ce.Tool == "t"
		}},
		{"transport", &host.CallError{Server: "s", Tool: "t", Err: errors.New("EOF")}, func(err error) bool {
			var ce *host.CallError
			return errors.As(err, &ce) && !ce.Timeout && ce.Server == "s"
		}},
		{"other", errors.New("boom"), func(err error) bool { return err.Error() == "node p: boom" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := encodeError(tc.err).decode("p"); !tc.check(got) {
				t.Errorf("%v came back as %#v", tc.err, got)
			}
		})
	}
}
