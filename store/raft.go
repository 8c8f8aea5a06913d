package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// RaftOptions tunes the raft stores.
type RaftOptions struct {
	// LogCacheSize is how many recent log entries are kept in memory
	// (512 when ≤ 0).
	LogCacheSize int
	// SnapshotsRetained is how many file snapshots are kept (2 when ≤ 0).
	SnapshotsRetained int
	// NoFreelistSync skips writing bbolt's freelist on each commit: faster
	// commits, slower open after a crash.
	NoFreelistSync bool
	// OpenTimeout bounds waiting for the file lock held by another
	// process (1 s when ≤ 0).
	OpenTimeout time.Duration
	// SnapshotLog receives the snapshot store's messages (discarded if nil).
	SnapshotLog io.Writer
}

// Raft is the durable storage of one raft node under <dir>: raft.db (bbolt,
// both the log and the stable store, the log behind an in-memory cache)
// and file snapshots.
type Raft struct {
	Dir       string
	Log       raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
	bolt      *raftboltdb.BoltStore
}

// OpenRaft opens or creates the raft stores in dir.
func OpenRaft(dir string, o RaftOptions) (*Raft, error) {
	if o.LogCacheSize <= 0 {
		o.LogCacheSize = 512
	}
	if o.SnapshotsRetained <= 0 {
		o.SnapshotsRetained = 2
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = time.Second
	}
	if o.SnapshotLog == nil {
		o.SnapshotLog = io.Discard
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: raft dir: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	b, err := raftboltdb.New(raftboltdb.Options{
		Path:        path,
		BoltOptions: &bbolt.Options{Timeout: o.OpenTimeout, NoFreelistSync: o.NoFreelistSync},
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := checkLog(b); err != nil {
		b.Close()
		return nil, err
	}
	cache, err := raft.NewLogCache(o.LogCacheSize, b)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("store: log cache: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, o.SnapshotsRetained, o.SnapshotLog)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("store: snapshots: %w", err)
	}
	return &Raft{Dir: dir, Log: cache, Stable: b, Snapshots: snaps, bolt: b}, nil
}

// checkLog reads the first and last log entries so that a damaged file
// fails at open, not in the middle of an election.
func checkLog(b *raftboltdb.BoltStore) error {
	first, err := b.FirstIndex()
	if err != nil {
		return fmt.Errorf("store: raft log first index: %w", err)
	}
	last, err := b.LastIndex()
	if err != nil {
		return fmt.Errorf("store: raft log last index: %w", err)
	}
	if last == 0 {
		return nil
	}
	var l raft.Log
	for _, i := range []uint64{first, last} {
		if err := b.GetLog(i, &l); err != nil {
			return fmt.Errorf("store: raft log entry %d: %w", i, err)
		}
	}
	return nil
}

// Stats returns the bbolt statistics of raft.db (freelist size etc.).
func (r *Raft) Stats() bbolt.Stats { return r.bolt.Stats() }

// Close closes raft.db. Close raft itself first.
func (r *Raft) Close() error { return r.bolt.Close() }
