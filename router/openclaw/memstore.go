package openclaw

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Store defaults, as the contract sets them.
const (
	DefaultTTL = time.Hour
	DefaultCap = 1000
)

// MemStoreOptions configure a MemStore. Zero values take the defaults.
type MemStoreOptions struct {
	TTL time.Duration // from the last access (default 1 h)
	Cap int           // live sessions at most (default 1000)
	// Now is the clock (default time.Now); tests may move it.
	Now func() time.Time
}

// MemStore is the SessionStore of a single node: sessions in a map under
// one lock, an expiry timer set to the earliest deadline, changes
// delivered to subscribers under the lock so they arrive in order.
type MemStore struct {
	ttl time.Duration
	cap int
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]*Session
	subs     map[int]func(Change)
	nextSub  int
	timer    *time.Timer
	timerAt  time.Time
	closed   bool
}

// NewMemStore returns an empty store. Close stops its expiry timer.
func NewMemStore(o MemStoreOptions) *MemStore {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Cap <= 0 {
		o.Cap = DefaultCap
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &MemStore{ttl: o.TTL, cap: o.Cap, now: o.Now, sessions: map[string]*Session{}, subs: map[int]func(Change){}}
}

// Close stops the expiry timer; the store answers nothing after it.
func (m *MemStore) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
	}
}

// errClosed answers calls after Close.
var errClosed = fmt.Errorf("openclaw: session store closed")

// live reports whether s has not expired at now. A session in a turn gets
// one TTL of grace past its expiry, so a long turn is not reaped under
// it, while a turn whose node died does not pin the session forever.
func (m *MemStore) live(s *Session, now time.Time) bool {
	if now.Before(s.ExpiresAt) {
		return true
	}
	return s.Active && now.Before(s.ExpiresAt.Add(m.ttl))
}

// deadline is when s stops being live.
func (m *MemStore) deadline(s *Session) time.Time {
	if s.Active {
		return s.ExpiresAt.Add(m.ttl)
	}
	return s.ExpiresAt
}

// lookup returns the live session id; callers hold mu.
func (m *MemStore) lookup(id string, now time.Time) (*Session, error) {
	if m.closed {
		return nil, errClosed
	}
	s, ok := m.sessions[id]
	if !ok || !m.live(s, now) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return s, nil
}

func (m *MemStore) renew(s *Session, now time.Time) {
	s.LastAccess = now
	s.ExpiresAt = now.Add(m.ttl)
}

// emit delivers a change; callers hold mu.
func (m *MemStore) emit(c Change) {
	for _, fn := range m.subs {
		fn(c)
	}
}

// reapLocked removes the expired sessions; callers hold mu.
func (m *MemStore) reapLocked(now time.Time) {
	var gone []*Session
	for id, s := range m.sessions {
		if !m.live(s, now) {
			delete(m.sessions, id)
			gone = append(gone, s)
		}
	}
	slices.SortFunc(gone, func(a, b *Session) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
	for _, s := range gone {
		m.emit(Change{Kind: Closed, Session: s.Clone(), Reason: ReasonExpired})
	}
}

// schedule sets the timer to the earliest deadline; callers hold mu.
func (m *MemStore) schedule() {
	if m.closed {
		return
	}
	var next time.Time
	for _, s := range m.sessions {
		if d := m.deadline(s); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if next.IsZero() || (m.timer != nil && next.Equal(m.timerAt)) {
		return
	}
	if m.timer != nil {
		m.timer.Stop()
	}
	m.timerAt = next
	// A little past the deadline, so the session has expired by the
	// clock when the timer fires.
	m.timer = time.AfterFunc(time.Until(next)+time.Millisecond, m.Reap)
}

// Reap removes the expired sessions now (the timer calls it too).
func (m *MemStore) Reap() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.timer, m.timerAt = nil, time.Time{}
	m.reapLocked(m.now())
	m.schedule()
}

// Create implements SessionStore.
func (m *MemStore) Create(_ context.Context, ns NewSession) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	now := m.now()
	m.reapLocked(now)
	if _, ok := m.sessions[ns.ID]; ok {
		return nil, fmt.Errorf("%w: %s", ErrExists, ns.ID)
	}
	if len(m.sessions) >= m.cap {
		var lru *Session
		for _, s := range m.sessions {
			if !s.Active && (lru == nil || s.LastAccess.Before(lru.LastAccess) ||
				(s.LastAccess.Equal(lru.LastAccess) && s.ID < lru.ID)) {
				lru = s
			}
		}
		if lru == nil {
			return nil, fmt.Errorf("%w: %d sessions, all in a turn", ErrCapacity, len(m.sessions))
		}
		delete(m.sessions, lru.ID)
		m.emit(Change{Kind: Closed, Session: lru.Clone(), Reason: ReasonEvicted})
	}
	s := &Session{
		ID: ns.ID, Owner: ns.Owner, Model: ns.Model, SystemPrompt: ns.SystemPrompt, Tools: cloneRaw(ns.Tools),
		History: []json.RawMessage{}, CreatedAt: now,
	}
	m.renew(s, now)
	m.sessions[s.ID] = s
	m.emit(Change{Kind: Created, Session: s.Clone()})
	m.schedule()
	return s.Clone(), nil
}

// Get implements SessionStore.
func (m *MemStore) Get(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookup(id, m.now())
	if err != nil {
		return nil, err
	}
	return s.Clone(), nil
}

// Touch implements SessionStore.
func (m *MemStore) Touch(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s, err := m.lookup(id, now)
	if err != nil {
		return nil, err
	}
	m.renew(s, now)
	m.emit(Change{Kind: Touched, Session: s.Clone()})
	m.schedule()
	return s.Clone(), nil
}

// List implements SessionStore.
func (m *MemStore) List(context.Context) ([]*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	now := m.now()
	out := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		if m.live(s, now) {
			out = append(out, s.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *Session) int {
		if c := a.LastAccess.Compare(b.LastAccess); c != 0 {
			return c
		}
		return cmpString(a.ID, b.ID)
	})
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BeginTurn implements SessionStore.
func (m *MemStore) BeginTurn(_ context.Context, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s, err := m.lookup(id, now)
	if err != nil {
		return nil, err
	}
	if s.Active {
		return nil, fmt.Errorf("%w on session %s (turn %d)", ErrConflict, id, s.TurnCount+1)
	}
	s.Active = true
	s.TurnStartedAt = now
	m.renew(s, now)
	m.emit(Change{Kind: TurnBegan, Session: s.Clone()})
	m.schedule()
	return s.Clone(), nil
}

// EndTurn implements SessionStore.
func (m *MemStore) EndTurn(_ context.Context, id string, end TurnEnd) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s, err := m.lookup(id, now)
	if err != nil {
		return nil, err
	}
	if !s.Active || end.Turn != s.TurnCount+1 {
		return nil, fmt.Errorf("%w: session %s is not in turn %d", ErrConflict, id, end.Turn)
	}
	s.Active = false
	s.TurnStartedAt = time.Time{}
	if !end.Failed {
		for _, msg := range end.Messages {
			s.History = append(s.History, cloneRaw(msg))
		}
		s.TurnCount++
	}
	m.renew(s, now)
	e := end
	e.Messages = slices.Clone(end.Messages)
	m.emit(Change{Kind: TurnEnded, Session: s.Clone(), TurnEnd: &e})
	m.schedule()
	return s.Clone(), nil
}

// Edit implements SessionStore.
func (m *MemStore) Edit(_ context.Context, id string, e Edit) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s, err := m.lookup(id, now)
	if err != nil {
		return nil, err
	}
	h, err := ApplyEdit(s.History, e)
	if err != nil {
		return nil, err
	}
	s.History = h
	m.renew(s, now)
	m.emit(Change{Kind: Edited, Session: s.Clone(), Edit: &e})
	m.schedule()
	return s.Clone(), nil
}

// Destroy implements SessionStore.
func (m *MemStore) Destroy(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookup(id, m.now())
	if err != nil {
		return err
	}
	delete(m.sessions, id)
	m.emit(Change{Kind: Closed, Session: s.Clone(), Reason: ReasonDeleted})
	return nil
}

// Subscribe implements SessionStore.
func (m *MemStore) Subscribe(fn func(Change)) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = fn
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subs, id)
	}
}

// ApplyEdit returns history with e applied: a pure function, so a Raft
// state machine applies edits exactly as MemStore does. The input is not
// modified.
func ApplyEdit(history []json.RawMessage, e Edit) ([]json.RawMessage, error) {
	if !e.Mode.Valid() {
		return nil, fmt.Errorf("%w: mode %q", ErrBadEdit, e.Mode)
	}
	if len(e.Message) == 0 {
		return nil, fmt.Errorf("%w: no message", ErrBadEdit)
	}
	if e.ToolCallID != "" {
		called, answered := toolCallState(history, e.ToolCallID)
		if !called {
			return nil, fmt.Errorf("%w: %q", ErrUnknownToolCall, e.ToolCallID)
		}
		if answered {
			return nil, fmt.Errorf("%w: %q", ErrToolCallAnswered, e.ToolCallID)
		}
	}
	msg := cloneRaw(e.Message)
	out := slices.Clone(history)
	switch e.Mode {
	case EditAppend:
		out = append(out, msg)
	case EditPrepend:
		at := len(out)
		for i := len(out) - 1; i >= 0; i-- {
			if roleOf(out[i]) == "user" {
				at = i
				break
			}
		}
		out = slices.Insert(out, at, msg)
	case EditReplace:
		if len(out) == 0 {
			out = append(out, msg)
		} else {
			out[len(out)-1] = msg
		}
	}
	return out, nil
}

// roleOf is the role of a JSON message ("" when it has none).
func roleOf(msg json.RawMessage) string {
	var m struct {
		Role string `json:"role"`
	}
	_ = json.Unmarshal(msg, &m)
	return m.Role
}

// toolCallState reports whether an assistant message of history called
// id, and whether a tool message answered it.
func toolCallState(history []json.RawMessage, id string) (called, answered bool) {
	for _, raw := range history {
		var m struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		switch m.Role {
		case "assistant":
			for _, c := range m.ToolCalls {
				if c.ID == id {
					called = true
				}
			}
		case "tool":
			if m.ToolCallID == id {
				answered = true
			}
		}
	}
	return called, answered
}
