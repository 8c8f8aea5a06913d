package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"fusion/cluster"
	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
	"fusion/hub"
	"fusion/jobs"
	"fusion/router/admin"
)

// DefaultMinFreeDisk is the space a download leaves free by default.
const DefaultMinFreeDisk = 1 << 30

// HFConfig configures the Hugging Face downloads.
type HFConfig struct {
	// Endpoint is the Hub (default hub.DefaultEndpoint); Token is sent
	// for gated and private repos.
	Endpoint string
	Token    string
	// ModelScopeEndpoint is ModelScope (default
	// hub.DefaultModelScopeEndpoint) and ModelScopeToken its access token
	// (private repos), for downloads with source "modelscope".
	ModelScopeEndpoint string
	ModelScopeToken    string
	// MinFreeDisk is the space a download must leave free on the models
	// directory's disk; it is refused before fetching a byte otherwise.
	MinFreeDisk int64
	// FreeBytes reads a directory's free space (default statfs; tests
	// set it).
	FreeBytes func(dir string) (int64, error)
	// Parallel is how many files of one download are fetched at once
	// (default 4).
	Parallel int
	// Parts is how many ranged requests fetch one large file at once,
	// each at least MinPart bytes (defaults hub.DefaultParts and
	// hub.DefaultMinPart; 1 = one stream a file).
	Parts   int
	MinPart int64
}

// JobsConfig bounds the node's background jobs.
type JobsConfig struct {
	// MaxRunning is how many jobs may run at once on the node (default
	// jobs.DefaultMaxRunning).
	MaxRunning int
	// ProgressEvery is how often a running job's record is written
	// (default jobs.DefaultProgressEvery).
	ProgressEvery time.Duration
}

// newJobs builds the job manager over the cluster's replicated records,
// or a lone node's file, and the Hub client.
func (n *Node) newJobs() error {
	var store jobs.Store
	self := soloID(n.cfg.Cluster.NodeID)
	if n.member != nil {
		store, self = raftJobs{m: n.member}, n.member.ID()
	} else {
		path := ""
		if n.cfg.DataDir != "" {
			path = filepath.Join(n.cfg.DataDir, "jobs.json")
		}
		ms, err := jobs.OpenMemStore(path)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		store = ms
	}
	n.jobs = jobs.New(jobs.Config{Node: self, Store: store, MaxRunning: n.cfg.Jobs.MaxRunning,
		ProgressEvery: n.cfg.Jobs.ProgressEvery, Logger: n.cfg.Logger})
	n.hub = hub.New(hub.Options{Endpoint: n.cfg.HF.Endpoint, Token: n.cfg.HF.Token})
	n.modelScope = hub.New(hub.Options{Source: hub.SourceModelScope, Endpoint: n.cfg.HF.ModelScopeEndpoint, Token: n.cfg.HF.ModelScopeToken})
	return nil
}

// startJobs marks the jobs this node's previous run left live
// interrupted; in a cluster it retries until the write commits (a
// leader may not be elected yet) or the node stops.
func (n *Node) startJobs() {
	ctx, cancel := context.WithCancel(context.Background())
	n.stopJobs, n.jobsDone = cancel, make(chan struct{})
	go func() {
		defer close(n.jobsDone)
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			err := n.jobs.Start(ctx)
			if err == nil || ctx.Err() != nil {
				return
			}
			n.cfg.Logger.Warn("jobs: the last run's jobs are not marked interrupted yet", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

// closeJobs stops the running jobs (each recorded interrupted); it runs
// before the node leaves its cluster, so the records get written.
func (n *Node) closeJobs() error {
	if n.stopJobs != nil {
		n.stopJobs()
		<-n.jobsDone
	}
	n.jobs.Close()
	return nil
}

// Jobs is the node's job manager.
func (n *Node) Jobs() *jobs.Manager { return n.jobs }

// nodeJobs serves the admin jobs routes.
type nodeJobs struct{ m *jobs.Manager }

func (j nodeJobs) List() []jobs.Job               { return j.m.Store().List() }
func (j nodeJobs) Get(id string) (jobs.Job, bool) { return j.m.Store().Get(id) }
func (j nodeJobs) Cancel(ctx context.Context, id string) (jobs.Job, error) {
	return j.m.Cancel(ctx, id)
}
func (j nodeJobs) Delete(ctx context.Context, id string) error { return j.m.Store().Delete(ctx, id) }

// nodeHub serves the admin Hugging Face routes.
type nodeHub struct{ n *Node }

// client is the client of source (hub.SourceHF or hub.SourceModelScope).
func (h nodeHub) client(source string) *hub.Client {
	if source == hub.SourceModelScope {
		return h.n.modelScope
	}
	return h.n.hub
}

func (h nodeHub) Search(ctx context.Context, source string, o hub.SearchOptions) ([]hub.Model, error) {
	return h.client(source).Search(ctx, o)
}

// Download starts a job that fetches the repo into the models directory.
func (h nodeHub) Download(ctx context.Context, req admin.DownloadRequest) (jobs.Job, error) {
	n := h.n
	req.Node = n.jobs.Node()
	c := h.client(req.Source)
	return n.jobs.Submit(ctx, "download", req, func(ctx context.Context, r *jobs.Reporter) (any, error) {
		r.SetTotal("bytes", 0)
		r.Logf("downloading %s from %s into %s", req.Repo, c.Endpoint(), n.cfg.ModelsDir)
		res, err := hub.Fetch(ctx, c, hub.Request{Repo: req.Repo, Revision: req.Revision, Allow: req.Allow}, hub.FetchOptions{
			ModelsDir: n.cfg.ModelsDir, Name: req.Name, MinFree: n.cfg.HF.MinFreeDisk, FreeBytes: n.cfg.HF.FreeBytes,
			Parallel: n.cfg.HF.Parallel, Parts: n.cfg.HF.Parts, MinPart: n.cfg.HF.MinPart, HFCache: n.cfg.HFCache, Force: req.Force,
			Progress: func(done, total int64) {
				r.SetTotal("bytes", total)
				r.SetDone(done)
			},
			Log: func(msg string) { r.Logf("%s", msg) },
		})
		if err != nil {
			r.Logf("failed: %v", err)
			return nil, err
		}
		// The model is in the models dir: the engine finds it on its next
		// scan (every listing scans), the cluster at its next report.
		return res, nil
	})
}

// raftJobs keeps the job records in the cluster's Raft state.
type raftJobs struct{ m *cluster.Member }

func (s raftJobs) Put(ctx context.Context, j jobs.Job) error {
	_, err := s.m.Apply(ctx, &pb.JobPut{Job: jobToPB(j)})
	if errors.Is(err, fsm.ErrConflict) {
		return fmt.Errorf("%w: %v", jobs.ErrFinished, err)
	}
	return err
}

func (s raftJobs) Delete(ctx context.Context, id string) error {
	_, err := s.m.Apply(ctx, &pb.JobDelete{Id: id})
	switch {
	case errors.Is(err, fsm.ErrNotFound):
		return jobs.ErrNotFound
	case errors.Is(err, fsm.ErrConflict):
		return fmt.Errorf("%w: %v", jobs.ErrRunning, err)
	}
	return err
}

func (s raftJobs) Interrupt(ctx context.Context, node string, at time.Time) error {
	_, err := s.m.Apply(ctx, &pb.JobsInterrupt{Node: node, UnixNano: at.UnixNano()})
	return err
}

func (s raftJobs) List() []jobs.Job {
	var list []*pb.Job
	s.m.FSM().Read(func(st *fsm.State) { list = st.Jobs() })
	out := make([]jobs.Job, len(list))
	for i, j := range list {
		out[i] = jobFromPB(j)
	}
	return out
}

func (s raftJobs) Get(id string) (jobs.Job, bool) {
	var (
		j  *pb.Job
		ok bool
	)
	s.m.FSM().Read(func(st *fsm.State) { j, ok = st.Job(id) })
	if !ok {
		return jobs.Job{}, false
	}
	return jobFromPB(j), true
}

func jobToPB(j jobs.Job) *pb.Job {
	return &pb.Job{Id: j.ID, Kind: j.Kind, Node: j.Node, State: j.State,
		CreatedUnixNano: j.Created.UnixNano(), UpdatedUnixNano: j.Updated.UnixNano(),
		Unit: j.Progress.Unit, Done: j.Progress.Done, Total: j.Progress.Total, Rate: j.Progress.Rate, EtaSeconds: j.Progress.ETA,
		Log: j.Log, Error: j.Error, Params: j.Params, Result: j.Result}
}

func jobFromPB(p *pb.Job) jobs.Job {
	j := jobs.Job{ID: p.Id, Kind: p.Kind, Node: p.Node, State: p.State,
		Created: time.Unix(0, p.CreatedUnixNano), Updated: time.Unix(0, p.UpdatedUnixNano),
		Progress: jobs.Progress{Unit: p.Unit, Done: p.Done, Total: p.Total, Rate: p.Rate, ETA: p.EtaSeconds},
		Log:      p.Log, Error: p.Error, Params: p.Params, Result: p.Result}
	if j.Log == nil {
		j.Log = []string{}
	}
	if j.Progress.Total > 0 {
		j.Progress.Percent = float64(j.Progress.Done) * 100 / float64(j.Progress.Total)
	}
	return j
}

// DataDir is the node's data directory and ModelsDir its models
// directory (where downloads land).
func (n *Node) DataDir() string   { return n.cfg.DataDir }
func (n *Node) ModelsDir() string { return n.cfg.ModelsDir }
