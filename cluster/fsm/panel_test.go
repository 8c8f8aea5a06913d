package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	pb "fusion/cluster/clusterpb"
)

func panelHash(name string) []byte {
	h := sha256.Sum256([]byte(name))
	return h[:]
}

func panelPut(name string, now, expires int64, max uint32) *pb.PanelSessionPut {
	return &pb.PanelSessionPut{Session: &pb.PanelSession{Hash: panelHash(name), CreatedUnixNano: now, ExpiresUnixNano: expires},
		NowUnixNano: now, MaxSessions: max}
}

// TestPanelSessions: a panel session is live until its expiry or its end;
// the cap ends the sessions that expire first, counting only live ones;
// bad commands are refused; the sessions survive a snapshot, and a
// backup restored into a running cluster keeps the running cluster's.
func TestPanelSessions(t *testing.T) {
	h := newHarness(t)
	live := func(name string, now int64) bool {
		_, ok := h.s.PanelSession(panelHash(name), now)
		return ok
	}
	h.ok(panelPut("a", 0, 100*sec, 3))
	if !live("a", 99*sec) || live("a", 100*sec) || live("b", 0) {
		t.Fatal("a: live until 100 s only, b unknown")
	}
	h.ok(panelPut("b", sec, 50*sec, 3))
	h.ok(panelPut("c", 2*sec, 300*sec, 3))
	// The cap (3): d ends b, the one that expires first.
	h.ok(panelPut("d", 3*sec, 200*sec, 3))
	if live("b", 3*sec) || !live("a", 3*sec) || !live("c", 3*sec) || !live("d", 3*sec) || h.s.PanelSessionCount() != 3 {
		t.Fatalf("after the cap: a %v b %v c %v d %v, %d stored", live("a", 3*sec), live("b", 3*sec), live("c", 3*sec), live("d", 3*sec), h.s.PanelSessionCount())
	}
	// At 150 s a has expired: e takes its place, nothing live is ended.
	h.ok(panelPut("e", 150*sec, 400*sec, 3))
	if !live("c", 150*sec) || !live("d", 150*sec) || !live("e", 150*sec) || h.s.PanelSessionCount() != 3 {
		t.Fatalf("expired a not dropped first: %d stored", h.s.PanelSessionCount())
	}
	// Sign-out ends it; ending it again (or an unknown one) is fine.
	h.ok(&pb.PanelSessionEnd{Hash: panelHash("d")})
	h.ok(&pb.PanelSessionEnd{Hash: panelHash("d")})
	if live("d", 150*sec) {
		t.Fatal("d live after its end")
	}
	for _, bad := range []*pb.PanelSessionPut{
		{Session: &pb.PanelSession{Hash: []byte("short"), ExpiresUnixNano: 10}, NowUnixNano: 1},
		panelPut("f", 10*sec, 10*sec, 0),
		{NowUnixNano: 1},
	} {
		if r := h.apply(bad); !errors.Is(r.Err, ErrInvalid) {
			t.Errorf("%v: %v, want invalid", bad, r.Err)
		}
	}

	var buf bytes.Buffer
	if _, err := h.s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	backup := buf.Bytes()
	s2, err := ReadState(bytes.NewReader(backup), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.PanelSession(panelHash("c"), 150*sec); !ok || s2.PanelSessionCount() != 2 {
		t.Fatalf("after a snapshot: c live %v, %d stored", ok, s2.PanelSessionCount())
	}
	var again bytes.Buffer
	if _, err := s2.WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), backup) {
		t.Fatalf("snapshot of the restored state differs (%v)", err)
	}
	// Restored into a cluster where only g is signed in: g stays, the
	// backup's c and e do not come back.
	cur := newHarness(t)
	cur.ok(panelPut("g", 0, 100*sec, 0))
	r, err := ForRestore(bytes.NewReader(backup), cur.s)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.PanelSession(panelHash("g"), sec); !ok || r.PanelSessionCount() != 1 {
		t.Fatalf("restore: g live %v, %d stored", ok, r.PanelSessionCount())
	}
}
