package fsm

import (
	"context"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM adapts State to raft.FSM: it serialises Apply, takes copy-on-write
// snapshots, swaps state atomically on Restore and tells subscribers about
// every change after it is applied.
type FSM struct {
	dedupSize int

	mu    sync.RWMutex
	state *State

	waitMu  sync.Mutex
	waitCh  chan struct{} // closed and replaced after each apply
	subMu   sync.Mutex
	nextSub int
	subs    map[int]func([]Change)
}

// New returns an FSM with empty state (see NewState for dedupSize).
func New(dedupSize int) *FSM {
	return &FSM{dedupSize: dedupSize, state: NewState(dedupSize), waitCh: make(chan struct{}), subs: map[int]func([]Change){}}
}

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM; it returns a Result.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.ApplyCommand(l.Index, l.Data)
}

// ApplyCommand applies raw command bytes at index (tests and offline tools).
func (f *FSM) ApplyCommand(index uint64, data []byte) Result {
	f.mu.Lock()
	r := f.state.Apply(index, data)
	f.mu.Unlock()
	f.notify(r.Changes)
	return r
}

// Subscribe registers fn to be called, in apply order, with the changes of
// every applied command, and a Reset change after a restore. fn runs on
// the apply path: it must not block. The returned func unsubscribes.
func (f *FSM) Subscribe(fn func([]Change)) (cancel func()) {
	f.subMu.Lock()
	id := f.nextSub
	f.nextSub++
	f.subs[id] = fn
	f.subMu.Unlock()
	return func() {
		f.subMu.Lock()
		delete(f.subs, id)
		f.subMu.Unlock()
	}
}

func (f *FSM) notify(ch []Change) {
	f.waitMu.Lock()
	close(f.waitCh)
	f.waitCh = make(chan struct{})
	f.waitMu.Unlock()
	if len(ch) == 0 {
		return
	}
	f.subMu.Lock()
	fns := make([]func([]Change), 0, len(f.subs))
	for _, fn := range f.subs {
		fns = append(fns, fn)
	}
	f.subMu.Unlock()
	for _, fn := range fns {
		fn(ch)
	}
}

// AppliedIndex is the index of the last applied command.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.applied
}

// WaitApplied blocks until the FSM has applied index.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.waitMu.Lock()
		ch := f.waitCh
		f.waitMu.Unlock()
		if f.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Read runs fn with the state under the read lock. fn must not keep s or
// modify what it returns; State's read methods return copies.
func (f *FSM) Read(fn func(s *State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Snapshot implements raft.FSM: a cheap copy of the maps under the lock.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &snapshot{state: f.state.clone()}, nil
}

// Restore implements raft.FSM: it decodes into fresh state and swaps it in.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := ReadState(rc, f.dedupSize)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.state = s
	idx := s.applied
	f.mu.Unlock()
	f.notify([]Change{{Index: idx, Table: TableAll, Kind: Reset}})
	return nil
}

type snapshot struct{ state *State }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.state.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
