// Package jobs runs a node's background work (model downloads, and later
// quantizations and benchmarks) as jobs: each a goroutine with its own
// context, cancellable, stopped when the node stops, whose record (kind,
// node, state, progress with rate and ETA, a log tail, result or error)
// is written to a Store as it runs. In a cluster the Store is the Raft
// state, so every node lists every job; a lone node keeps its records in
// a file. A node that starts marks the jobs its previous run left live
// interrupted.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// States of a job; the last four are final.
const (
	Queued      = "queued"
	Running     = "running"
	Done        = "done"
	Failed      = "failed"
	Cancelled   = "cancelled"
	Interrupted = "interrupted"
)

// Final reports whether state is one a job does not leave.
func Final(state string) bool {
	switch state {
	case Done, Failed, Cancelled, Interrupted:
		return true
	}
	return false
}

// Job is a job's record: what GET /admin/api/jobs lists.
type Job struct {
	ID       string          `json:"id"`
	Kind     string          `json:"kind"`
	Node     string          `json:"node"`
	State    string          `json:"state"`
	Created  time.Time       `json:"created_at"`
	Updated  time.Time       `json:"updated_at"`
	Progress Progress        `json:"progress"`
	Log      []string        `json:"log"`
	Error    string          `json:"error,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
}

// Progress is how far a job is.
type Progress struct {
	Unit    string  `json:"unit"` // "bytes" or "steps"
	Done    int64   `json:"done"`
	Total   int64   `json:"total"`       // 0: unknown
	Percent float64 `json:"percent"`     // 0–100 (0 while the total is unknown)
	Rate    float64 `json:"rate"`        // units per second, over the last interval
	ETA     float64 `json:"eta_seconds"` // 0: unknown
}

// Store keeps the job records.
type Store interface {
	// Put writes a record (creates or replaces it); a record already in
	// a final state is not changed (ErrFinished).
	Put(ctx context.Context, j Job) error
	// Delete removes a finished job's record.
	Delete(ctx context.Context, id string) error
	// Interrupt marks every queued or running job of node created up to
	// at interrupted.
	Interrupt(ctx context.Context, node string, at time.Time) error
	// List returns every record, newest first; Get one.
	List() []Job
	Get(id string) (Job, bool)
}

// Errors callers branch on.
var (
	ErrNotFound = errors.New("jobs: no such job")
	ErrFinished = errors.New("jobs: the job is finished")
	ErrRunning  = errors.New("jobs: the job is still running")
	// ErrElsewhere: the job runs on another node (cancel it there).
	ErrElsewhere = errors.New("jobs: the job runs on another node")
	ErrClosed    = errors.New("jobs: the manager is closed")
	ErrTooMany   = errors.New("jobs: too many jobs running")
	ErrNotReady  = errors.New("jobs: not ready")
)

// Limits.
const (
	DefaultLogLines      = 20
	MaxLogLine           = 500
	DefaultProgressEvery = time.Second
	DefaultMaxRunning    = 4
	// DefaultMaxResultBytes bounds a job's result (its JSON): within the
	// cluster's record limit (fsm.MaxJobBytes, 32 KiB) beside the params
	// and a full log tail.
	DefaultMaxResultBytes = 16 << 10
	// maxTrimmedError bounds the error of a record written again trimmed.
	maxTrimmedError = 1 << 10
)

// Func is a job's work. It reports through r and returns its result
// (encoded as JSON into the record) or an error; it must return soon
// after ctx ends.
type Func func(ctx context.Context, r *Reporter) (any, error)

// Config configures a Manager.
type Config struct {
	Node  string // this node's id
	Store Store
	// ProgressEvery is how often a running job's record is written
	// (default DefaultProgressEvery).
	ProgressEvery time.Duration
	// LogLines is how many log lines a record keeps (default
	// DefaultLogLines).
	LogLines int
	// MaxRunning bounds the jobs running at once on this node; more
	// are refused with ErrTooMany (default DefaultMaxRunning).
	MaxRunning int
	// MaxResultBytes bounds a job's result as JSON: a job whose result
	// is larger fails saying so, rather than ending done without it
	// (default DefaultMaxResultBytes).
	MaxResultBytes int
	Logger         *slog.Logger
}

// Manager runs this node's jobs.
type Manager struct {
	cfg    Config
	ctx    context.Context // ends at Close
	stop   context.CancelFunc
	mu     sync.Mutex
	closed bool
	live   map[string]*run
	wg     sync.WaitGroup
	// ready closes once Start has marked the last run's jobs: a job
	// submitted before would be marked with them.
	ready     chan struct{}
	readyOnce sync.Once
}

type run struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	final  Job // the last record, set before done closes
}

// errShutdown is the cause of a job stopped by Close.
var errShutdown = errors.New("the node is stopping")

// errCancelled is the cause of a job stopped by Cancel.
var errCancelled = errors.New("cancelled")

// New makes a manager. Call Start before Submit.
func New(cfg Config) *Manager {
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.LogLines <= 0 {
		cfg.LogLines = DefaultLogLines
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = DefaultMaxRunning
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, ctx: ctx, stop: stop, live: map[string]*run{}, ready: make(chan struct{})}
}

// Start marks the jobs a previous run of this node left queued or
// running interrupted: their goroutines died with it.
func (m *Manager) Start(ctx context.Context) error {
	if err := m.cfg.Store.Interrupt(ctx, m.cfg.Node, time.Now()); err != nil {
		return fmt.Errorf("jobs: marking the last run's jobs interrupted: %w", err)
	}
	m.readyOnce.Do(func() { close(m.ready) })
	return nil
}

// Node is the node the manager runs jobs on.
func (m *Manager) Node() string { return m.cfg.Node }

// Store is the manager's store.
func (m *Manager) Store() Store { return m.cfg.Store }

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "job-" + hex.EncodeToString(b[:])
}

// Submit records a job of kind with params and runs fn in the
// background. It waits for Start to have succeeded (or ctx to end).
func (m *Manager) Submit(ctx context.Context, kind string, params any, fn Func) (Job, error) {
	select {
	case <-m.ready:
	case <-ctx.Done():
		return Job{}, fmt.Errorf("%w: the last run's jobs are not marked yet: %v", ErrNotReady, ctx.Err())
	case <-m.ctx.Done():
		return Job{}, ErrClosed
	}
	p, err := json.Marshal(params)
	if err != nil {
		return Job{}, fmt.Errorf("jobs: params: %w", err)
	}
	now := time.Now()
	j := Job{ID: newID(), Kind: kind, Node: m.cfg.Node, State: Running, Created: now, Updated: now, Params: p, Log: []string{}}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Job{}, ErrClosed
	}
	if len(m.live) >= m.cfg.MaxRunning {
		m.mu.Unlock()
		return Job{}, fmt.Errorf("%w: %d at once on this node", ErrTooMany, m.cfg.MaxRunning)
	}
	jctx, cancel := context.WithCancelCause(m.ctx)
	r := &run{cancel: cancel, done: make(chan struct{})}
	m.live[j.ID] = r
	m.wg.Add(1)
	m.mu.Unlock()
	if err := m.cfg.Store.Put(ctx, j); err != nil {
		m.mu.Lock()
		delete(m.live, j.ID)
		m.mu.Unlock()
		cancel(nil)
		m.wg.Done()
		return Job{}, fmt.Errorf("jobs: recording the job: %w", err)
	}
	rep := &Reporter{lines: m.cfg.LogLines, job: j}
	go m.run(jctx, r, rep, fn)
	return j, nil
}

// run runs one job: its work, a writer of its progress every interval,
// and its final record.
func (m *Manager) run(ctx context.Context, r *run, rep *Reporter, fn Func) {
	defer m.wg.Done()
	defer close(r.done)
	defer func() {
		m.mu.Lock()
		delete(m.live, rep.job.ID)
		m.mu.Unlock()
	}()
	id := rep.job.ID
	workDone := make(chan struct{})
	var result any
	var err error
	go func() {
		defer close(workDone)
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("jobs: the job panicked: %v", p)
			}
		}()
		result, err = fn(ctx, rep)
	}()
	tick := time.NewTicker(m.cfg.ProgressEvery)
	defer tick.Stop()
	last := rep.snapshot(time.Now(), nil)
	for running := true; running; {
		select {
		case <-workDone:
			running = false
		case now := <-tick.C:
			j := rep.snapshot(now, &last)
			// A write that fails (no quorum for a while) is retried at
			// the next tick; the final record is what matters.
			if perr := m.put(j.Job); perr != nil {
				m.cfg.Logger.Warn("job progress not recorded", "job", id, "err", perr)
			}
			last = j
		}
	}
	j := rep.snapshot(time.Now(), &last)
	j.Progress.Rate, j.Progress.ETA = 0, 0
	switch cause := context.Cause(ctx); {
	case err == nil:
		j.State = Done
		if result != nil {
			b, merr := json.Marshal(result)
			switch {
			case merr != nil:
				j.State, j.Error = Failed, fmt.Sprintf("jobs: the result: %v", merr)
			case len(b) > m.cfg.MaxResultBytes:
				j.State, j.Error = Failed, fmt.Sprintf("the job's result is %d bytes, over the limit of %d bytes: it is not recorded", len(b), m.cfg.MaxResultBytes)
			default:
				j.Result = b
			}
		}
		if j.State == Done && j.Progress.Total > 0 {
			j.Progress.Done = j.Progress.Total
			j.Progress.Percent = 100
		}
	case errors.Is(cause, errCancelled):
		j.State, j.Error = Cancelled, "cancelled"
	case errors.Is(cause, errShutdown):
		j.State, j.Error = Interrupted, "interrupted: "+errShutdown.Error()
	default:
		j.State, j.Error = Failed, err.Error()
	}
	m.cfg.Logger.Info("job finished", "job", id, "kind", j.Kind, "state", j.State, "err", j.Error)
	r.final = m.putFinal(j.Job)
}

// putFinal writes a job's final record. A record the store refuses (one
// over the cluster's size limit, say) is written again without its
// result and log, then without its params, with an error saying why: a
// job never stays running until the next start. It returns the record
// written (the first one when none was).
func (m *Manager) putFinal(j Job) Job {
	perr := m.put(j)
	if perr == nil || errors.Is(perr, ErrFinished) {
		return j
	}
	first := perr
	t := j
	t.Result, t.Log = nil, []string{}
	if n := len(j.Log); n > 0 {
		t.Log = []string{j.Log[n-1]}
	}
	if t.State == Done {
		t.State = Failed
	}
	t.Error = fmt.Sprintf("the final record was refused (%v); it is recorded without its result and log", first)
	if j.Error != "" {
		t.Error = j.Error + "; " + t.Error
	}
	if len(t.Error) > maxTrimmedError {
		t.Error = t.Error[:maxTrimmedError] + "…"
	}
	for _, trim := range []func(*Job){func(*Job) {}, func(t *Job) { t.Params, t.Log = nil, []string{} }} {
		trim(&t)
		if perr = m.put(t); perr == nil || errors.Is(perr, ErrFinished) {
			m.cfg.Logger.Warn("job end recorded trimmed", "job", j.ID, "err", first)
			return t
		}
	}
	m.cfg.Logger.Warn("job end not recorded (the next start marks it interrupted)", "job", j.ID, "err", first, "trimmed", perr)
	return j
}

// putTimeout bounds one record write of a running job: it outlives
// Close (a stopping node still records its jobs' end) but not for long.
const putTimeout = 5 * time.Second

func (m *Manager) put(j Job) error {
	ctx, cancel := context.WithTimeout(context.Background(), putTimeout)
	defer cancel()
	return m.cfg.Store.Put(ctx, j)
}

// Cancel stops a job running on this node, waits for it to end and
// returns its last record (which a replicated store may show a moment
// later). A job of another node is ErrElsewhere; a finished one
// ErrFinished.
func (m *Manager) Cancel(ctx context.Context, id string) (Job, error) {
	m.mu.Lock()
	r, ok := m.live[id]
	m.mu.Unlock()
	if !ok {
		j, found := m.cfg.Store.Get(id)
		switch {
		case !found:
			return Job{}, ErrNotFound
		case Final(j.State):
			return j, ErrFinished
		case j.Node != m.cfg.Node:
			return j, ErrElsewhere
		}
		// Ours but not live: left by a previous run (Start marks those).
		return j, ErrFinished
	}
	r.cancel(errCancelled)
	select {
	case <-r.done:
		return r.final, nil
	case <-ctx.Done():
		return Job{}, ctx.Err()
	}
}

// Running lists the ids of the jobs running on this node.
func (m *Manager) Running() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.live))
	for id := range m.live {
		out = append(out, id)
	}
	return out
}

// Close stops every job (each recorded interrupted) and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	runs := make([]*run, 0, len(m.live))
	for _, r := range m.live {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	for _, r := range runs {
		r.cancel(errShutdown)
	}
	m.stop()
	m.wg.Wait()
}

// Reporter is how a job tells its progress and log.
type Reporter struct {
	mu    sync.Mutex
	lines int
	job   Job
}

// JobID is the id of the job reporting.
func (r *Reporter) JobID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job.ID
}

// SetTotal sets the unit ("bytes", "steps") and total of the progress.
func (r *Reporter) SetTotal(unit string, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job.Progress.Unit, r.job.Progress.Total = unit, total
}

// SetDone sets how much is done.
func (r *Reporter) SetDone(done int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job.Progress.Done = done
}

// Logf adds a line to the job's log (the record keeps the last few).
func (r *Reporter) Logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if len(line) > MaxLogLine {
		line = line[:MaxLogLine] + "…"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job.Log = append(r.job.Log, time.Now().UTC().Format("15:04:05 ")+line)
	if len(r.job.Log) > r.lines {
		r.job.Log = append([]string(nil), r.job.Log[len(r.job.Log)-r.lines:]...)
	}
}

// snap is a record plus what the rate needs.
type snap struct {
	Job
	at time.Time
}

// snapshot is the record now, its rate measured since prev.
func (r *Reporter) snapshot(now time.Time, prev *snap) snap {
	r.mu.Lock()
	j := r.job
	j.Log = append([]string(nil), r.job.Log...)
	r.mu.Unlock()
	j.Updated = now
	p := &j.Progress
	if p.Total > 0 {
		p.Percent = float64(p.Done) * 100 / float64(p.Total)
	}
	if prev != nil {
		if dt := now.Sub(prev.at).Seconds(); dt > 0 && p.Done >= prev.Progress.Done {
			p.Rate = float64(p.Done-prev.Progress.Done) / dt
		}
		if p.Rate > 0 && p.Total > p.Done {
			p.ETA = float64(p.Total-p.Done) / p.Rate
		}
	}
	return snap{Job: j, at: now}
}
