package raftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/router/openclaw"
)

// Member is what the store needs of a cluster member (*cluster.Member).
// Apply and ConsistentRead fail with cluster.ErrNoLeader when no leader
// answers within the member's hold time; the store reports that as
// openclaw.ErrUnavailable (a 503 the client retries).
type Member interface {
	// Apply commits a command through the leader.
	Apply(ctx context.Context, cmd proto.Message) (fsm.Result, error)
	// Session and Sessions read the local state (live sessions only).
	Session(id string) (*pb.Session, bool)
	Sessions() []*pb.Session
	// WatchSessions calls fn with every session change applied here.
	WatchSessions(fn func(fsm.Change)) (cancel func())
	// FSM is the local state machine (to wait for a write to apply here).
	FSM() *fsm.FSM
	// ConsistentRead waits until the local state holds every write
	// acknowledged before the call.
	ConsistentRead(ctx context.Context) error
}

// Options configure a Store; zero values take openclaw's defaults.
type Options struct {
	TTL time.Duration
	Cap int
}

// Store is an openclaw.SessionStore in the Raft state. Reads are local;
// writes go through the leader, and a write returns once it has been
// applied on this node, so this node reads its own writes. A session this
// node does not know yet (created through another node a moment ago) is
// looked up again after a consistent read, and listings and edits (which
// depend on the history: a tool call made on another node) start with
// one.
type Store struct {
	m   Member
	ttl time.Duration
	cap int

	mu      sync.Mutex
	last    map[string]*openclaw.Session // each session as of its last change, for ChangeBetween
	subs    map[int]func(openclaw.Change)
	nextSub int
	unwatch func()
}

// New returns a store over m; Close stops watching m.
func New(m Member, o Options) *Store {
	if o.TTL <= 0 {
		o.TTL = openclaw.DefaultTTL
	}
	if o.Cap <= 0 {
		o.Cap = openclaw.DefaultCap
	}
	s := &Store{m: m, ttl: o.TTL, cap: o.Cap, last: map[string]*openclaw.Session{}, subs: map[int]func(openclaw.Change){}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unwatch = m.WatchSessions(s.changed)
	s.reseed()
	return s
}

// Close stops watching the member.
func (s *Store) Close() { s.unwatch() }

// reseed rebuilds the last-seen state; callers hold mu.
func (s *Store) reseed() {
	s.last = map[string]*openclaw.Session{}
	for _, se := range s.m.Sessions() {
		s.last[se.Id] = convert(se)
	}
}

// changed turns the FSM's change into the protocol's and delivers it.
func (s *Store) changed(c fsm.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Table == fsm.TableAll { // restored from a snapshot
		s.reseed()
		return
	}
	before := s.last[c.Key]
	var after *openclaw.Session
	if c.Session != nil && c.Kind != fsm.Deleted {
		after = convert(c.Session)
		s.last[c.Key] = after
	} else {
		delete(s.last, c.Key)
		if before == nil {
			before = &openclaw.Session{ID: c.Key}
		}
	}
	reason := c.Reason
	if reason == "destroyed" {
		reason = openclaw.ReasonDeleted
	}
	ch := openclaw.ChangeBetween(before, after, reason)
	for _, fn := range s.subs {
		fn(ch)
	}
}

// Subscribe implements openclaw.SessionStore.
func (s *Store) Subscribe(fn func(openclaw.Change)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, id)
	}
}

// convert copies a replicated session into the protocol's.
func convert(se *pb.Session) *openclaw.Session {
	out := &openclaw.Session{
		ID: se.Id, Owner: se.Owner, Model: se.Model, SystemPrompt: se.SystemPrompt,
		TurnCount: int(se.Turn), Active: se.Active,
		CreatedAt: time.Unix(0, se.CreatedUnixNano), LastAccess: time.Unix(0, se.LastAccessUnixNano), ExpiresAt: time.Unix(0, se.ExpiresUnixNano),
		History: []json.RawMessage{},
	}
	if len(se.Tools) > 0 {
		out.Tools = append(json.RawMessage(nil), se.Tools...)
	}
	if len(se.History) > 0 {
		_ = json.Unmarshal(se.History, &out.History) // the FSM only stores JSON arrays
	}
	return out
}

// apply commits cmd, waits until it is applied here and returns the
// session id as this node now sees it.
func (s *Store) apply(ctx context.Context, id string, cmd proto.Message) (*openclaw.Session, error) {
	res, err := s.m.Apply(ctx, cmd)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, mapError(err, id)
	}
	if err := s.m.FSM().WaitApplied(ctx, res.Index); err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

func mapError(err error, id string) error {
	switch {
	case errors.Is(err, fsm.ErrNotFound):
		return fmt.Errorf("%w: %s", openclaw.ErrNotFound, id)
	case errors.Is(err, fsm.ErrExists):
		return fmt.Errorf("%w: %s", openclaw.ErrExists, id)
	case errors.Is(err, fsm.ErrConflict):
		return fmt.Errorf("%w: %v", openclaw.ErrConflict, err)
	case errors.Is(err, fsm.ErrSessionCap):
		return fmt.Errorf("%w: %v", openclaw.ErrCapacity, err)
	case errors.Is(err, cluster.ErrNoLeader):
		return fmt.Errorf("%w: %v", openclaw.ErrUnavailable, err)
	}
	return err
}

// Create implements openclaw.SessionStore.
func (s *Store) Create(ctx context.Context, ns openclaw.NewSession) (*openclaw.Session, error) {
	return s.apply(ctx, ns.ID, &pb.SessionCreate{
		Session:     &pb.Session{Id: ns.ID, Owner: ns.Owner, Model: ns.Model, SystemPrompt: ns.SystemPrompt, Tools: ns.Tools},
		MaxSessions: uint32(s.cap), Policy: pb.CapPolicy_CAP_POLICY_EVICT_LRU, TtlNanos: int64(s.ttl),
	})
}

// Get implements openclaw.SessionStore.
func (s *Store) Get(ctx context.Context, id string) (*openclaw.Session, error) {
	se, ok := s.m.Session(id)
	if !ok {
		if err := s.m.ConsistentRead(ctx); err != nil {
			return nil, mapError(err, id)
		}
		if se, ok = s.m.Session(id); !ok {
			return nil, fmt.Errorf("%w: %s", openclaw.ErrNotFound, id)
		}
	}
	return convert(se), nil
}

// List implements openclaw.SessionStore. It reads after a consistent
// read, so a session created or deleted through another node a moment
// ago is listed, or not, as the client that did it expects.
func (s *Store) List(ctx context.Context) ([]*openclaw.Session, error) {
	if err := s.m.ConsistentRead(ctx); err != nil {
		return nil, mapError(err, "")
	}
	all := s.m.Sessions()
	out := make([]*openclaw.Session, len(all))
	for i, se := range all {
		out[i] = convert(se)
	}
	slices.SortFunc(out, func(a, b *openclaw.Session) int {
		if c := a.LastAccess.Compare(b.LastAccess); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return out, nil
}

// Touch implements openclaw.SessionStore.
func (s *Store) Touch(ctx context.Context, id string) (*openclaw.Session, error) {
	return s.apply(ctx, id, &pb.SessionTouch{Id: id, TtlNanos: int64(s.ttl)})
}

// BeginTurn implements openclaw.SessionStore. The FSM's compare-and-set
// is on the completed-turn count this node last saw; when that view was
// stale (a turn ended elsewhere, not applied here yet) it retries with
// the leader's count; a running turn is a conflict.
func (s *Store) BeginTurn(ctx context.Context, id string) (*openclaw.Session, error) {
	cur, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	expect := uint64(cur.TurnCount)
	for range 3 {
		res, err := s.m.Apply(ctx, &pb.SessionTurnBegin{Id: id, ExpectTurn: expect, TtlNanos: int64(s.ttl)})
		if err == nil {
			err = res.Err
		}
		var fe *fsm.Error
		if errors.As(err, &fe) && fe.Code == fsm.CodeConflict && fe.CurrentIndex != expect {
			expect = fe.CurrentIndex
			continue
		}
		if err != nil {
			return nil, mapError(err, id)
		}
		if err := s.m.FSM().WaitApplied(ctx, res.Index); err != nil {
			return nil, err
		}
		return s.Get(ctx, id)
	}
	return nil, fmt.Errorf("%w: session %s keeps changing", openclaw.ErrConflict, id)
}

// EndTurn implements openclaw.SessionStore. The turn's answer (Result)
// is not replicated: the streams rebuild it from the appended messages.
func (s *Store) EndTurn(ctx context.Context, id string, end openclaw.TurnEnd) (*openclaw.Session, error) {
	cmd := &pb.SessionTurnEnd{Id: id, Turn: uint64(end.Turn - 1), Aborted: end.Failed, TtlNanos: int64(s.ttl)}
	if !end.Failed && len(end.Messages) > 0 {
		b, err := json.Marshal(end.Messages)
		if err != nil {
			return nil, err
		}
		cmd.HistoryAppend = b
	}
	return s.apply(ctx, id, cmd)
}

// Edit implements openclaw.SessionStore: the edit is applied to the
// history this node sees and written back with a compare-and-set on the
// session's modify index (so it never lands across a turn or another
// edit); on a conflict it reads again and reapplies the edit.
func (s *Store) Edit(ctx context.Context, id string, e openclaw.Edit) (*openclaw.Session, error) {
	for attempt := 0; ; attempt++ {
		if err := s.m.ConsistentRead(ctx); err != nil {
			return nil, mapError(err, id)
		}
		se, ok := s.m.Session(id)
		if !ok {
			return nil, fmt.Errorf("%w: %s", openclaw.ErrNotFound, id)
		}
		h, err := openclaw.ApplyEdit(convert(se).History, e)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		turn, mod := se.Turn, se.ModifyIndex
		got, err := s.apply(ctx, id, &pb.SessionUpdate{Id: id, ExpectTurn: &turn, ExpectModify: &mod, SetHistory: true, History: b})
		if errors.Is(err, openclaw.ErrConflict) && attempt < maxEditAttempts-1 && ctx.Err() == nil {
			continue // a turn ended or another edit landed in between
		}
		return got, err
	}
}

// maxEditAttempts bounds Edit's compare-and-set retries; past it the
// client gets a 409 to retry.
const maxEditAttempts = 8

// Destroy implements openclaw.SessionStore.
func (s *Store) Destroy(ctx context.Context, id string) error {
	if _, err := s.Get(ctx, id); err != nil {
		return err
	}
	res, err := s.m.Apply(ctx, &pb.SessionDestroy{Id: id})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return mapError(err, id)
	}
	return s.m.FSM().WaitApplied(ctx, res.Index)
}
