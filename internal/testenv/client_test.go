package testenv

import (
	"testing"
	"time"
)

func TestClientContextFollowsTheTestDeadline(t *testing.T) {
	ctx, cancel := ClientContext(t)
	defer cancel()
	got, ok := ctx.Deadline()
	if !ok {
		t.Fatal("client context has no deadline")
	}
	want := time.Now().Add(clientDefault)
	if d, ok := t.Deadline(); ok {
		want = d.Add(-clientMargin)
	}
	if diff := got.Sub(want); diff < -time.Second || diff > time.Second {
		t.Fatalf("deadline %v, want %v (±1s)", got, want)
	}
}
