package openclaw

import "testing"

func TestHub(t *testing.T) {
	h := newHub(2)
	a, _ := h.watch("a")
	a2, _ := h.watch("a")
	b, _ := h.watch("b")
	sa := &Session{ID: "a"}
	h.publish(Change{Kind: TurnBegan, Session: sa})
	h.publish(Change{Kind: TurnEnded, Session: sa, TurnEnd: &TurnEnd{Turn: 1}})
	if len(a.ch) != 2 || len(b.ch) != 0 {
		t.Fatalf("a holds %d, b %d; want 2 and 0", len(a.ch), len(b.ch))
	}
	<-a2.ch // a2 keeps up, a does not
	h.publish(Change{Kind: Touched, Session: sa})
	if !a.lagged || h.watching("a") != 1 {
		t.Fatalf("a full: lagged %v, watchers of a %d", a.lagged, h.watching("a"))
	}
	for range a.ch { // closed after what it held
	}
	// Closed ends the stream after delivering it.
	<-a2.ch
	<-a2.ch
	h.publish(Change{Kind: Closed, Session: sa, Reason: ReasonDeleted})
	if c, ok := <-a2.ch; !ok || c.Kind != Closed {
		t.Fatalf("a2 got %v %v, want the close", c, ok)
	}
	if _, ok := <-a2.ch; ok || a2.lagged || h.watching("a") != 0 {
		t.Fatal("a2 not ended after the close")
	}
	h.unwatch(a2) // idempotent
	// Shutdown ends the rest and refuses new streams.
	h.close()
	if _, ok := <-b.ch; ok {
		t.Fatal("b open after close")
	}
	if _, ok := h.watch("c"); ok {
		t.Fatal("watch after close")
	}
}
