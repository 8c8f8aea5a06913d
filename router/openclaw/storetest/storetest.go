// Package storetest checks that an openclaw.SessionStore keeps the
// protocol's semantics: TTL from the last access, the cap with LRU
// eviction of idle sessions, one turn at a time, history edits, and the
// change notifications in order. MemStore runs it; a Raft-backed store
// runs the same suite.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"fusion/router/openclaw"
)

// Factory returns a new, empty store with the given TTL and cap, closed
// when the test ends.
type Factory func(t *testing.T, ttl time.Duration, capacity int) openclaw.SessionStore

// Run runs the suite against stores from newStore. The expiry tests use
// real time with a TTL of a second and generous margins, since a
// replicated store takes its clock from its leader.
func Run(t *testing.T, newStore Factory) {
	t.Run("CreateGetList", func(t *testing.T) { testCreate(t, newStore) })
	t.Run("NotFound", func(t *testing.T) { testNotFound(t, newStore) })
	t.Run("Turns", func(t *testing.T) { testTurns(t, newStore) })
	t.Run("ConcurrentTurns", func(t *testing.T) { testConcurrentTurns(t, newStore) })
	t.Run("Edits", func(t *testing.T) { testEdits(t, newStore) })
	t.Run("CapLRU", func(t *testing.T) { testCap(t, newStore) })
	t.Run("ExpiryAndRenewal", func(t *testing.T) { testExpiry(t, newStore) })
	t.Run("Copies", func(t *testing.T) { testCopies(t, newStore) })
}

// changes collects a store's change notifications.
type changes struct {
	mu     sync.Mutex
	list   []openclaw.Change
	signal chan struct{}
}

func watch(t *testing.T, s openclaw.SessionStore) *changes {
	c := &changes{signal: make(chan struct{}, 1)}
	stop := s.Subscribe(func(ch openclaw.Change) {
		c.mu.Lock()
		c.list = append(c.list, ch)
		c.mu.Unlock()
		select {
		case c.signal <- struct{}{}:
		default:
		}
	})
	t.Cleanup(stop)
	return c
}

var kindNames = map[openclaw.ChangeKind]string{
	openclaw.Created: "created", openclaw.Touched: "touched", openclaw.TurnBegan: "begin",
	openclaw.TurnEnded: "end", openclaw.Edited: "edit", openclaw.Closed: "closed",
}

// summary is "kind:id[:reason]" per change.
func (c *changes) summary() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.list))
	for i, ch := range c.list {
		out[i] = kindNames[ch.Kind] + ":" + ch.Session.ID
		if ch.Reason != "" {
			out[i] += ":" + ch.Reason
		}
	}
	return out
}

// waitFor waits (up to 10 s) until the summary holds want in order,
// possibly among other changes.
func (c *changes) waitFor(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if isSubsequence(want, c.summary()) {
			return
		}
		select {
		case <-c.signal:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("changes %v do not hold %v in order", c.summary(), want)
		}
	}
}

func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func create(t *testing.T, s openclaw.SessionStore, id string) *openclaw.Session {
	t.Helper()
	got, err := s.Create(context.Background(), openclaw.NewSession{ID: id, Model: "m"})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return got
}

func msg(role, content string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"role":%q,"content":%q}`, role, content))
}

func testCreate(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 10)
	ch := watch(t, s)
	before := time.Now()
	tools := json.RawMessage(`[{"type":"function","function":{"name":"f"}}]`)
	got, err := s.Create(ctx, openclaw.NewSession{ID: "s1", Owner: "key1", Model: "m", SystemPrompt: "be brief", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "s1" || got.Owner != "key1" || got.Model != "m" || got.SystemPrompt != "be brief" || string(got.Tools) != string(tools) ||
		got.TurnCount != 0 || got.Active || len(got.History) != 0 {
		t.Fatalf("created %+v", got)
	}
	if got.ExpiresAt.Sub(got.LastAccess) != time.Hour || got.CreatedAt.Before(before.Add(-time.Minute)) || got.CreatedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("timestamps created %v, last access %v, expires %v", got.CreatedAt, got.LastAccess, got.ExpiresAt)
	}
	if _, err := s.Create(ctx, openclaw.NewSession{ID: "s1", Model: "m"}); !errors.Is(err, openclaw.ErrExists) {
		t.Fatalf("duplicate id: %v, want ErrExists", err)
	}
	create(t, s, "s2")
	g, err := s.Get(ctx, "s1")
	if err != nil || g.SystemPrompt != "be brief" {
		t.Fatalf("get: %+v %v", g, err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	ch.waitFor(t, "created:s1", "created:s2")
}

func testNotFound(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 10)
	errs := map[string]error{}
	_, errs["get"] = s.Get(ctx, "nope")
	_, errs["touch"] = s.Touch(ctx, "nope")
	_, errs["begin"] = s.BeginTurn(ctx, "nope")
	_, errs["end"] = s.EndTurn(ctx, "nope", openclaw.TurnEnd{Turn: 1})
	_, errs["edit"] = s.Edit(ctx, "nope", openclaw.Edit{Mode: openclaw.EditAppend, Message: msg("user", "x")})
	errs["destroy"] = s.Destroy(ctx, "nope")
	for op, err := range errs {
		if !errors.Is(err, openclaw.ErrNotFound) {
			t.Errorf("%s on an unknown session: %v, want ErrNotFound", op, err)
		}
	}
}

func testTurns(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 10)
	ch := watch(t, s)
	create(t, s, "a")
	got, err := s.BeginTurn(ctx, "a")
	if err != nil || !got.Active || got.TurnCount != 0 {
		t.Fatalf("begin: %+v %v", got, err)
	}
	if _, err := s.BeginTurn(ctx, "a"); !errors.Is(err, openclaw.ErrConflict) {
		t.Fatalf("second begin: %v, want ErrConflict", err)
	}
	if _, err := s.EndTurn(ctx, "a", openclaw.TurnEnd{Turn: 2}); !errors.Is(err, openclaw.ErrConflict) {
		t.Fatalf("end of another turn: %v, want ErrConflict", err)
	}
	in := []json.RawMessage{msg("user", "hi"), msg("assistant", "yo")}
	got, err = s.EndTurn(ctx, "a", openclaw.TurnEnd{Turn: 1, Messages: in, Result: json.RawMessage(`{"content":"yo"}`)})
	if err != nil || got.Active || got.TurnCount != 1 || len(got.History) != 2 || string(got.History[1]) != string(in[1]) {
		t.Fatalf("end: %+v %v", got, err)
	}
	if _, err := s.EndTurn(ctx, "a", openclaw.TurnEnd{Turn: 1}); !errors.Is(err, openclaw.ErrConflict) {
		t.Fatalf("end twice: %v, want ErrConflict", err)
	}
	if _, err := s.BeginTurn(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	got, err = s.EndTurn(ctx, "a", openclaw.TurnEnd{Turn: 2, Failed: true, Messages: in})
	if err != nil || got.Active || got.TurnCount != 1 || len(got.History) != 2 {
		t.Fatalf("failed end: %+v %v", got, err)
	}
	if err := s.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ch.waitFor(t, "created:a", "begin:a", "end:a", "begin:a", "end:a", "closed:a:deleted")
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, c := range ch.list {
		if c.Kind != openclaw.TurnEnded || c.TurnEnd.Turn != 1 {
			continue
		}
		// The answer may be dropped (the streams rebuild it from the
		// messages), not altered.
		if r := c.TurnEnd.Result; len(r) > 0 && string(r) != `{"content":"yo"}` {
			t.Fatalf("the turn's result changed on its way: %s", r)
		}
		if m := c.TurnEnd.Messages; len(m) != 2 || string(m[1]) != string(in[1]) {
			t.Fatalf("the turn's messages did not reach the change: %s", m)
		}
	}
}

func testConcurrentTurns(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 10)
	create(t, s, "a")
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for range 16 {
		wg.Go(func() {
			_, err := s.BeginTurn(ctx, "a")
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins++
			} else if errors.Is(err, openclaw.ErrConflict) {
				conflicts++
			}
		})
	}
	wg.Wait()
	if wins != 1 || conflicts != 15 {
		t.Fatalf("wins %d, conflicts %d; want 1 and 15", wins, conflicts)
	}
}

func testEdits(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 10)
	ch := watch(t, s)
	create(t, s, "a")
	call := json.RawMessage(`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}`)
	result := json.RawMessage(`{"role":"tool","tool_call_id":"call_1","content":"42"}`)
	steps := []struct {
		edit  openclaw.Edit
		err   error
		roles []string
	}{
		{openclaw.Edit{Mode: openclaw.EditAppend, Message: msg("user", "q")}, nil, []string{"user"}},
		{openclaw.Edit{Mode: openclaw.EditAppend, Message: call}, nil, []string{"user", "assistant"}},
		{openclaw.Edit{Mode: openclaw.EditAppend, Message: result, ToolCallID: "call_2"}, openclaw.ErrUnknownToolCall, []string{"user", "assistant"}},
		{openclaw.Edit{Mode: openclaw.EditAppend, Message: result, ToolCallID: "call_1"}, nil, []string{"user", "assistant", "tool"}},
		{openclaw.Edit{Mode: openclaw.EditAppend, Message: result, ToolCallID: "call_1"}, openclaw.ErrToolCallAnswered, []string{"user", "assistant", "tool"}},
		{openclaw.Edit{Mode: openclaw.EditPrepend, Message: msg("system", "s")}, nil, []string{"system", "user", "assistant", "tool"}},
		{openclaw.Edit{Mode: openclaw.EditReplace, Message: msg("user", "r")}, nil, []string{"system", "user", "assistant", "user"}},
		{openclaw.Edit{Mode: "sideways", Message: msg("user", "r")}, openclaw.ErrBadEdit, []string{"system", "user", "assistant", "user"}},
	}
	for i, st := range steps {
		_, err := s.Edit(ctx, "a", st.edit)
		if !errors.Is(err, st.err) {
			t.Fatalf("step %d: %v, want %v", i, err, st.err)
		}
		got, _ := s.Get(ctx, "a")
		var roles []string
		for _, m := range got.History {
			var r struct{ Role string }
			_ = json.Unmarshal(m, &r)
			roles = append(roles, r.Role)
		}
		if !slices.Equal(roles, st.roles) {
			t.Fatalf("step %d: roles %v, want %v", i, roles, st.roles)
		}
	}
	ch.waitFor(t, "created:a", "edit:a", "edit:a", "edit:a", "edit:a", "edit:a")
}

func testCap(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 3)
	ch := watch(t, s)
	for _, id := range []string{"a", "b", "c"} {
		create(t, s, id)
		time.Sleep(5 * time.Millisecond) // distinct access times
	}
	if _, err := s.Touch(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	create(t, s, "d") // b is the least recently accessed
	ch.waitFor(t, "closed:b:evicted", "created:d")
	if _, err := s.Get(ctx, "b"); !errors.Is(err, openclaw.ErrNotFound) {
		t.Fatalf("evicted b: %v", err)
	}
	// Sessions in a turn are never evicted.
	for _, id := range []string{"a", "c", "d"} {
		if _, err := s.BeginTurn(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, openclaw.NewSession{ID: "e", Model: "m"}); !errors.Is(err, openclaw.ErrCapacity) {
		t.Fatalf("create with every session in a turn: %v, want ErrCapacity", err)
	}
	if _, err := s.EndTurn(ctx, "c", openclaw.TurnEnd{Turn: 1, Failed: true}); err != nil {
		t.Fatal(err)
	}
	create(t, s, "e") // c is the only idle one
	ch.waitFor(t, "closed:c:evicted", "created:e")
	list, _ := s.List(ctx)
	if len(list) != 3 {
		t.Fatalf("%d sessions at cap 3", len(list))
	}
}

func testExpiry(t *testing.T, newStore Factory) {
	ctx := context.Background()
	const ttl = time.Second
	s := newStore(t, ttl, 10)
	ch := watch(t, s)
	create(t, s, "a")
	create(t, s, "b")
	time.Sleep(600 * time.Millisecond)
	if _, err := s.Touch(ctx, "a"); err != nil { // a now lives one TTL more
		t.Fatal(err)
	}
	touched := time.Now()
	time.Sleep(600 * time.Millisecond)                  // b is past its TTL
	if time.Since(touched) < ttl-100*time.Millisecond { // unless the machine stalled
		if _, err := s.Get(ctx, "a"); err != nil {
			t.Fatalf("renewed a gone early: %v", err)
		}
	}
	if _, err := s.Get(ctx, "b"); !errors.Is(err, openclaw.ErrNotFound) {
		t.Fatalf("b after its TTL: %v, want ErrNotFound", err)
	}
	for _, x := range mustList(t, s) {
		if x.ID == "b" {
			t.Fatal("expired b listed")
		}
	}
	// Both get reaped on their own, with a change each.
	ch.waitFor(t, "closed:b:expired")
	ch.waitFor(t, "closed:a:expired")
	if list := mustList(t, s); len(list) != 0 {
		t.Fatalf("sessions left after expiry: %v", list)
	}
}

func mustList(t *testing.T, s openclaw.SessionStore) []*openclaw.Session {
	t.Helper()
	l, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testCopies(t *testing.T, newStore Factory) {
	ctx := context.Background()
	s := newStore(t, time.Hour, 10)
	create(t, s, "a")
	got, err := s.Edit(ctx, "a", openclaw.Edit{Mode: openclaw.EditAppend, Message: msg("user", "q")})
	if err != nil {
		t.Fatal(err)
	}
	got.History[0][2] = 'X'
	got.History = append(got.History, msg("user", "sneaky"))
	got.TurnCount = 99
	again, _ := s.Get(ctx, "a")
	if len(again.History) != 1 || string(again.History[0]) != string(msg("user", "q")) || again.TurnCount != 0 {
		t.Fatalf("a returned session shares memory with the store: %+v", again)
	}
}
