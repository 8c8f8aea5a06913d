package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"fusion/internal/atomicfile"
)

// MaxRecords bounds the records a MemStore keeps: a new job over it
// evicts the oldest finished one (the cluster's FSM keeps the same cap).
const MaxRecords = 1000

// MemStore keeps the records of a lone node in memory and, when it has a
// path, in a JSON file rewritten atomically on every change (so a restart
// finds the jobs its previous run left).
type MemStore struct {
	path string
	mu   sync.Mutex
	jobs map[string]Job
}

// OpenMemStore reads the records at path ("" keeps them in memory only).
func OpenMemStore(path string) (*MemStore, error) {
	s := &MemStore{path: path, jobs: map[string]Job{}}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	var list []Job
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("jobs: %s: %w", path, err)
	}
	for _, j := range list {
		s.jobs[j.ID] = j
	}
	return s, nil
}

// save writes the file (under mu).
func (s *MemStore) save() error {
	if s.path == "" {
		return nil
	}
	b, err := json.Marshal(s.sorted())
	if err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	return atomicfile.WriteMode(s.path, 0o600, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

func (s *MemStore) sorted() []Job {
	out := make([]Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].Created.Equal(out[b].Created) {
			return out[a].Created.After(out[b].Created)
		}
		return out[a].ID < out[b].ID
	})
	return out
}

// Put implements Store.
func (s *MemStore) Put(_ context.Context, j Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.jobs[j.ID]; ok && Final(old.State) {
		return fmt.Errorf("%w: %s is %s", ErrFinished, j.ID, old.State)
	} else if !ok && len(s.jobs) >= MaxRecords {
		var victim *Job
		for _, o := range s.jobs {
			if Final(o.State) && (victim == nil || o.Updated.Before(victim.Updated)) {
				victim = &o
			}
		}
		if victim == nil {
			return fmt.Errorf("%w: %d jobs are live", ErrTooMany, len(s.jobs))
		}
		delete(s.jobs, victim.ID)
	}
	s.jobs[j.ID] = j
	return s.save()
}

// Delete implements Store.
func (s *MemStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return ErrNotFound
	}
	if !Final(j.State) {
		return fmt.Errorf("%w: %s is %s", ErrRunning, id, j.State)
	}
	delete(s.jobs, id)
	return s.save()
}

// Interrupt implements Store.
func (s *MemStore) Interrupt(_ context.Context, node string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for id, j := range s.jobs {
		if j.Node == node && !Final(j.State) && !j.Created.After(at) {
			j.State, j.Updated, j.Progress.Rate, j.Progress.ETA = Interrupted, at, 0, 0
			if j.Error == "" {
				j.Error = "the node restarted while the job ran"
			}
			s.jobs[id] = j
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return s.save()
}

// List implements Store.
func (s *MemStore) List() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sorted()
}

// Get implements Store.
func (s *MemStore) Get(id string) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	return j, ok
}
