package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/jobs"
)

// fsmJobs is the cluster's job table without the Raft log: each Put is a
// JobPut applied to a real fsm.State, which refuses a record over
// fsm.MaxJobBytes as every replica would.
type fsmJobs struct {
	mu  sync.Mutex
	st  *fsm.State
	idx uint64
}

func (s *fsmJobs) apply(cmd *pb.JobPut) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := fsm.Encode(cmd)
	if err != nil {
		return err
	}
	s.idx++
	if err := s.st.Apply(s.idx, b).Err; err != nil {
		if errors.Is(err, fsm.ErrConflict) {
			return fmt.Errorf("%w: %v", jobs.ErrFinished, err)
		}
		return err
	}
	return nil
}

func (s *fsmJobs) Put(_ context.Context, j jobs.Job) error {
	return s.apply(&pb.JobPut{Job: jobToPB(j)})
}
func (s *fsmJobs) Delete(context.Context, string) error { return errors.New("not used") }
func (s *fsmJobs) Interrupt(context.Context, string, time.Time) error {
	return nil
}
func (s *fsmJobs) List() []jobs.Job { return nil }
func (s *fsmJobs) Get(id string) (jobs.Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.st.Job(id)
	if !ok {
		return jobs.Job{}, false
	}
	return jobFromPB(j), true
}

// TestFinalRecordTooLarge: a job whose final record the cluster's table
// refuses (over fsm.MaxJobBytes: long params, a full log of long lines
// and a result at the manager's limit) still ends final: written again
// without its result and log, failed, saying why — not left running
// until the node restarts.
func TestFinalRecordTooLarge(t *testing.T) {
	store := &fsmJobs{st: fsm.NewState(0)}
	m := jobs.New(jobs.Config{Node: "a", Store: store, ProgressEvery: time.Hour, MaxResultBytes: 16 << 10})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	params := map[string]string{"text": strings.Repeat("p", 12<<10)}
	for _, tc := range []struct {
		name   string
		result int // bytes of the result's string
		state  string
	}{
		{"fits", 100, jobs.Done},
		{"too large", 15 << 10, jobs.Failed},
	} {
		j, err := m.Submit(context.Background(), "quantize", params, func(_ context.Context, r *jobs.Reporter) (any, error) {
			for i := range jobs.DefaultLogLines {
				r.Logf("line %d %s", i, strings.Repeat("l", jobs.MaxLogLine))
			}
			return strings.Repeat("r", tc.result), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var got jobs.Job
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if got, _ = store.Get(j.ID); jobs.Final(got.State) || time.Now().After(deadline) {
				break
			}
		}
		switch {
		case got.State != tc.state:
			t.Errorf("%s: %s (%s), want %s", tc.name, got.State, got.Error, tc.state)
		case tc.state == jobs.Done && len(got.Result) != tc.result+2:
			t.Errorf("%s: result of %d bytes", tc.name, len(got.Result))
		case tc.state == jobs.Failed && (len(got.Result) != 0 || len(got.Log) > 1 || !strings.Contains(got.Error, "over the limit of 32768") ||
			!strings.Contains(got.Error, "recorded without its result and log")):
			t.Errorf("%s: %+v, want failed without result or log, saying why", tc.name, got)
		}
	}
}
