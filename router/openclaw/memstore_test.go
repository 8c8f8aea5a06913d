package openclaw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// clock is a test clock the store reads.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// recorder keeps the changes a store sends.
type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) add(c Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
}

// summary lists the changes as "kind:id[:reason]".
func (r *recorder) summary() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := map[ChangeKind]string{Created: "created", Touched: "touched", TurnBegan: "begin", TurnEnded: "end", Edited: "edit", Closed: "closed"}
	var out []string
	for _, c := range r.changes {
		s := names[c.Kind] + ":" + c.Session.ID
		if c.Reason != "" {
			s += ":" + c.Reason
		}
		out = append(out, s)
	}
	return out
}

func newTestStore(t *testing.T, ttl time.Duration, capacity int) (*MemStore, *clock, *recorder) {
	t.Helper()
	c := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := NewMemStore(MemStoreOptions{TTL: ttl, Cap: capacity, Now: c.Now})
	t.Cleanup(m.Close)
	rec := &recorder{}
	m.Subscribe(rec.add)
	return m, c, rec
}

func mustCreate(t *testing.T, m *MemStore, id string) *Session {
	t.Helper()
	s, err := m.Create(context.Background(), NewSession{ID: id, Model: "demo"})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return s
}

func TestMemStoreTTL(t *testing.T) {
	ctx := context.Background()
	m, c, rec := newTestStore(t, time.Minute, 10)
	s := mustCreate(t, m, "a")
	if want := s.CreatedAt.Add(time.Minute); !s.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", s.ExpiresAt, want)
	}
	mustCreate(t, m, "b")

	c.Advance(40 * time.Second)
	if _, err := m.Touch(ctx, "a"); err != nil { // renews a to 40s+60s
		t.Fatal(err)
	}
	g, err := m.Get(ctx, "a") // Get does not renew
	if err != nil || !g.ExpiresAt.Equal(s.CreatedAt.Add(100*time.Second)) {
		t.Fatalf("get a: %v %v", g, err)
	}
	c.Advance(30 * time.Second) // 70s: b expired, a lives until 100s
	if _, err := m.Get(ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get expired b: %v, want ErrNotFound", err)
	}
	list, _ := m.List(ctx)
	if len(list) != 1 || list[0].ID != "a" {
		t.Fatalf("list = %v, want [a]", list)
	}
	m.Reap()
	c.Advance(31 * time.Second) // 101s: a expired too
	if _, err := m.Touch(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("touch expired a: %v", err)
	}
	m.Reap()
	want := []string{"created:a", "created:b", "touched:a", "closed:b:expired", "closed:a:expired"}
	if got := rec.summary(); !slices.Equal(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
}

func TestMemStoreActiveGrace(t *testing.T) {
	ctx := context.Background()
	m, c, _ := newTestStore(t, time.Minute, 10)
	mustCreate(t, m, "a")
	if _, err := m.BeginTurn(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	c.Advance(90 * time.Second) // past its expiry, within one TTL of grace: the turn may still end
	m.Reap()
	if _, err := m.EndTurn(ctx, "a", TurnEnd{Turn: 1}); err != nil {
		t.Fatalf("end turn in grace: %v", err)
	}
	if _, err := m.BeginTurn(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	c.Advance(121 * time.Second) // a turn whose node died does not pin the session
	m.Reap()
	if _, err := m.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stuck session: %v, want ErrNotFound", err)
	}
}

func TestMemStoreExpiryTimer(t *testing.T) {
	m := NewMemStore(MemStoreOptions{TTL: 50 * time.Millisecond})
	defer m.Close()
	closed := make(chan Change, 4)
	m.Subscribe(func(c Change) {
		if c.Kind == Closed {
			closed <- c
		}
	})
	mustCreate(t, m, "a")
	select {
	case c := <-closed:
		if c.Session.ID != "a" || c.Reason != ReasonExpired {
			t.Fatalf("closed %s (%s), want a (expired)", c.Session.ID, c.Reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the expiry timer did not reap the session")
	}
}

func TestMemStoreCapLRU(t *testing.T) {
	ctx := context.Background()
	m, c, rec := newTestStore(t, time.Hour, 3)
	for _, id := range []string{"a", "b", "c"} {
		mustCreate(t, m, id)
		c.Advance(time.Second)
	}
	if _, err := m.Touch(ctx, "a"); err != nil { // a is now the most recent
		t.Fatal(err)
	}
	if _, err := m.BeginTurn(ctx, "b"); err != nil { // b is the oldest, but active
		t.Fatal(err)
	}
	mustCreate(t, m, "d") // evicts c: the least recently accessed inactive one
	list, _ := m.List(ctx)
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	if want := []string{"a", "b", "d"}; !slices.Equal(ids, want) {
		t.Fatalf("sessions = %v, want %v (least recently accessed first)", ids, want)
	}
	if got := rec.summary(); !slices.Contains(got, "closed:c:evicted") {
		t.Fatalf("changes %v lack the eviction of c", got)
	}
	// Every session in a turn: nothing to evict.
	for _, id := range []string{"a", "d"} {
		if _, err := m.BeginTurn(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Create(ctx, NewSession{ID: "e"}); !errors.Is(err, ErrCapacity) {
		t.Fatalf("create with every session active: %v, want ErrCapacity", err)
	}
	if _, err := m.Create(ctx, NewSession{ID: "a"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate id: %v, want ErrExists", err)
	}
	// Expired sessions do not count against the cap.
	c.Advance(3 * time.Hour)
	for _, id := range []string{"x", "y", "z"} {
		mustCreate(t, m, id)
	}
}

func TestMemStoreTurns(t *testing.T) {
	ctx := context.Background()
	m, _, rec := newTestStore(t, time.Hour, 10)
	mustCreate(t, m, "a")
	s, err := m.BeginTurn(ctx, "a")
	if err != nil || !s.Active || s.TurnCount != 0 {
		t.Fatalf("begin: %+v %v", s, err)
	}
	if _, err := m.BeginTurn(ctx, "a"); !errors.Is(err, ErrConflict) {
		t.Fatalf("second begin: %v, want ErrConflict", err)
	}
	if _, err := m.EndTurn(ctx, "a", TurnEnd{Turn: 2}); !errors.Is(err, ErrConflict) {
		t.Fatalf("end of another turn: %v, want ErrConflict", err)
	}
	msgs := []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(`{"role":"assistant","content":"yo"}`)}
	s, err = m.EndTurn(ctx, "a", TurnEnd{Turn: 1, Messages: msgs})
	if err != nil || s.Active || s.TurnCount != 1 || len(s.History) != 2 {
		t.Fatalf("end: %+v %v", s, err)
	}
	if _, err := m.EndTurn(ctx, "a", TurnEnd{Turn: 1}); !errors.Is(err, ErrConflict) {
		t.Fatalf("end twice: %v, want ErrConflict", err)
	}
	// A failed turn leaves history and count alone.
	if _, err := m.BeginTurn(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	s, err = m.EndTurn(ctx, "a", TurnEnd{Turn: 2, Failed: true, Messages: msgs})
	if err != nil || s.Active || s.TurnCount != 1 || len(s.History) != 2 {
		t.Fatalf("failed end: %+v %v", s, err)
	}
	// Stored copies are not shared with callers.
	s.History[0] = json.RawMessage(`{}`)
	if g, _ := m.Get(ctx, "a"); string(g.History[0]) != string(msgs[0]) {
		t.Fatalf("history changed through a returned copy: %s", g.History[0])
	}
	if err := m.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("destroy twice: %v", err)
	}
	want := []string{"created:a", "begin:a", "end:a", "begin:a", "end:a", "closed:a:deleted"}
	if got := rec.summary(); !slices.Equal(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
}

// TestMemStoreConcurrentTurns: of many concurrent BeginTurns exactly one
// wins.
func TestMemStoreConcurrentTurns(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newTestStore(t, time.Hour, 10)
	mustCreate(t, m, "a")
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for range 16 {
		wg.Go(func() {
			_, err := m.BeginTurn(ctx, "a")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrConflict):
				conflicts++
			}
		})
	}
	wg.Wait()
	if wins != 1 || conflicts != 15 {
		t.Fatalf("wins %d conflicts %d, want 1 and 15", wins, conflicts)
	}
}

func TestApplyEdit(t *testing.T) {
	user := func(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"role":"user","content":%q}`, s)) }
	asst := func(s string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"role":"assistant","content":%q}`, s))
	}
	call := json.RawMessage(`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}`)
	result := json.RawMessage(`{"role":"tool","tool_call_id":"call_1","content":"42"}`)
	steer := json.RawMessage(`{"role":"system","content":"S"}`)
	history := []json.RawMessage{user("u1"), asst("a1"), user("u2"), asst("a2")}
	tests := []struct {
		name    string
		history []json.RawMessage
		edit    Edit
		want    []json.RawMessage
		err     error
	}{
		{"append", history, Edit{Mode: EditAppend, Message: steer}, []json.RawMessage{user("u1"), asst("a1"), user("u2"), asst("a2"), steer}, nil},
		{"prepend before the last user message", history, Edit{Mode: EditPrepend, Message: steer}, []json.RawMessage{user("u1"), asst("a1"), steer, user("u2"), asst("a2")}, nil},
		{"prepend without a user message", []json.RawMessage{asst("a")}, Edit{Mode: EditPrepend, Message: steer}, []json.RawMessage{asst("a"), steer}, nil},
		{"replace the last message", history, Edit{Mode: EditReplace, Message: steer}, []json.RawMessage{user("u1"), asst("a1"), user("u2"), steer}, nil},
		{"replace in an empty history", nil, Edit{Mode: EditReplace, Message: steer}, []json.RawMessage{steer}, nil},
		{"bad mode", history, Edit{Mode: "insert", Message: steer}, nil, ErrBadEdit},
		{"no message", history, Edit{Mode: EditAppend}, nil, ErrBadEdit},
		{"tool result", []json.RawMessage{user("u"), call}, Edit{Mode: EditAppend, Message: result, ToolCallID: "call_1"}, []json.RawMessage{user("u"), call, result}, nil},
		{"tool result for an unknown call", []json.RawMessage{user("u"), call}, Edit{Mode: EditAppend, Message: result, ToolCallID: "call_2"}, nil, ErrUnknownToolCall},
		{"tool result twice", []json.RawMessage{user("u"), call, result}, Edit{Mode: EditAppend, Message: result, ToolCallID: "call_1"}, nil, ErrToolCallAnswered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.history)
			got, err := ApplyEdit(tt.history, tt.edit)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if !slices.EqualFunc(got, tt.want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
				t.Fatalf("history = %s, want %s", got, tt.want)
			}
			if !slices.EqualFunc(before, tt.history, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
				t.Fatal("ApplyEdit changed its input")
			}
		})
	}
}

func TestChangeBetween(t *testing.T) {
	u := json.RawMessage(`{"role":"user","content":"q"}`)
	a := json.RawMessage(`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`)
	tool := json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"42"}`)
	sys := json.RawMessage(`{"role":"system","content":"s"}`)
	idle := &Session{ID: "s", TurnCount: 1, History: []json.RawMessage{u}}
	with := func(f func(s *Session)) *Session { c := idle.Clone(); f(c); return c }
	busy := with(func(s *Session) { s.Active = true })
	tests := []struct {
		name          string
		before, after *Session
		check         func(t *testing.T, c Change)
	}{
		{"create", nil, idle, func(t *testing.T, c Change) {
			if c.Kind != Created {
				t.Fatal(c.Kind)
			}
		}},
		{"close", idle, nil, func(t *testing.T, c Change) {
			if c.Kind != Closed || c.Reason != ReasonExpired || c.Session.ID != "s" {
				t.Fatal(c)
			}
		}},
		{"begin", idle, busy, func(t *testing.T, c Change) {
			if c.Kind != TurnBegan {
				t.Fatal(c.Kind)
			}
		}},
		{"end", busy, with(func(s *Session) { s.TurnCount = 2; s.History = append(s.History, u, a) }), func(t *testing.T, c Change) {
			if c.Kind != TurnEnded || c.TurnEnd.Turn != 2 || c.TurnEnd.Failed || len(c.TurnEnd.Messages) != 2 || string(c.TurnEnd.Messages[1]) != string(a) {
				t.Fatalf("%+v %+v", c, c.TurnEnd)
			}
			r := resultFromMessages("s", 2, c.TurnEnd.Messages)
			if len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "c1" || r.FinishReason != "tool_calls" {
				t.Fatalf("rebuilt result %+v", r)
			}
		}},
		{"failed end", busy, idle, func(t *testing.T, c Change) {
			if c.Kind != TurnEnded || c.TurnEnd.Turn != 2 || !c.TurnEnd.Failed {
				t.Fatalf("%+v %+v", c, c.TurnEnd)
			}
		}},
		{"tool result", idle, with(func(s *Session) { s.History = append(s.History, tool) }), func(t *testing.T, c Change) {
			if c.Kind != Edited || c.Edit.ToolCallID != "c1" || string(c.Edit.Message) != string(tool) {
				t.Fatalf("%+v %+v", c, c.Edit)
			}
		}},
		{"steer prepend", idle, with(func(s *Session) { s.History = []json.RawMessage{sys, u} }), func(t *testing.T, c Change) {
			if c.Kind != Edited || c.Edit.ToolCallID != "" {
				t.Fatalf("%+v %+v", c, c.Edit)
			}
		}},
		{"touch", idle, with(func(s *Session) { s.ExpiresAt = s.ExpiresAt.Add(time.Hour) }), func(t *testing.T, c Change) {
			if c.Kind != Touched {
				t.Fatal(c.Kind)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, ChangeBetween(tt.before, tt.after, ReasonExpired)) })
	}
}
