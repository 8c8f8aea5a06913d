package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
	// Resumes is how many times in a row a download that a stop or
	// restart of the node interrupted is started again, on its own, when
	// the node starts (0: never; asked again, it resumes from the bytes
	// on disk all the same).
	Resumes int
}

// DefaultDownloadResumes is fusion serve's HFConfig.Resumes.
const DefaultDownloadResumes = 3

// JobsConfig bounds the node's background jobs.
type JobsConfig struct {
	// MaxRunning is how many jobs may run at once on the node (default
	// jobs.DefaultMaxRunning).
	MaxRunning int
	// ProgressEvery is how often a running job's record is written
	// (default jobs.DefaultProgressEvery).
	ProgressEvery time.Duration
	// MaxResultBytes bounds a job's result; a larger one fails the job
	// (default jobs.DefaultMaxResultBytes).
	MaxResultBytes int
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
		ProgressEvery: n.cfg.Jobs.ProgressEvery, MaxResultBytes: n.cfg.Jobs.MaxResultBytes, Logger: n.cfg.Logger})
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
		started := time.Now()
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
			err := n.jobs.Start(ctx)
			if err == nil {
				n.resumeDownloads(ctx, started)
				return
			}
			if ctx.Err() != nil {
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

// resumeDownloads starts again the downloads a stop or restart of this
// node interrupted (downloadsToResume); a download that does not start
// (too many jobs at once) is logged and stays interrupted.
func (n *Node) resumeDownloads(ctx context.Context, started time.Time) {
	for _, req := range downloadsToResume(n.jobs.Store().List(), n.jobs.Node(), started, n.cfg.HF.Resumes) {
		j, err := nodeHub{n: n}.Download(ctx, req)
		if err != nil {
			n.cfg.Logger.Warn("jobs: an interrupted download was not resumed", "job", req.Resumes, "repo", req.Repo, "err", err)
			continue
		}
		n.cfg.Logger.Info("jobs: resuming an interrupted download", "job", req.Resumes, "as", j.ID, "repo", req.Repo, "time", req.ResumeCount)
	}
}

// downloadsToResume are the requests that continue the download jobs of
// node a stop or restart interrupted (interrupted, or still live in list
// and created before the node started: being marked so), unless a later
// download of the same model was asked (or resumed) since, it was a
// placement's job (its downloads run on), or it was resumed max times in
// a row already.
func downloadsToResume(list []jobs.Job, node string, started time.Time, max int) []admin.DownloadRequest {
	type target struct {
		source, repo, revision, name, allow string
	}
	var (
		out    []admin.DownloadRequest
		latest = map[target]time.Time{}
		reqs   = map[string]admin.DownloadRequest{}
	)
	for _, j := range list {
		var req admin.DownloadRequest
		if j.Kind != "download" || j.Node != node || json.Unmarshal(j.Params, &req) != nil {
			continue
		}
		reqs[j.ID] = req
		t := target{req.Source, req.Repo, req.Revision, req.Name, strings.Join(req.Allow, "\x00")}
		if j.Created.After(latest[t]) {
			latest[t] = j.Created
		}
	}
	for _, j := range list {
		req, ok := reqs[j.ID]
		interrupted := j.State == jobs.Interrupted || !jobs.Final(j.State) && j.Created.Before(started)
		t := target{req.Source, req.Repo, req.Revision, req.Name, strings.Join(req.Allow, "\x00")}
		if !ok || !interrupted || req.Placement != nil || latest[t].After(j.Created) || req.ResumeCount >= max {
			continue
		}
		req.Resumes, req.ResumeCount = j.ID, req.ResumeCount+1
		out = append(out, req)
	}
	return out
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
func (j nodeJobs) Submit(ctx context.Context, kind string, params any, fn jobs.Func) (jobs.Job, error) {
	return j.m.Submit(ctx, kind, params, fn)
}

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

// Plan says what a download of req would fetch.
func (h nodeHub) Plan(ctx context.Context, req admin.DownloadRequest) (hub.Selection, error) {
	return hub.Plan(ctx, h.client(req.Source), hub.Request{Repo: req.Repo, Revision: req.Revision, Allow: req.Allow}, req.Name)
}

// Download starts a job that fetches the repo into the models directory.
func (h nodeHub) Download(ctx context.Context, req admin.DownloadRequest) (jobs.Job, error) {
	n := h.n
	req.Node = n.jobs.Node()
	c := h.client(req.Source)
	return n.jobs.Submit(ctx, "download", req, func(ctx context.Context, r *jobs.Reporter) (any, error) {
		r.SetTotal("bytes", 0)
		if req.Resumes != "" {
			r.Logf("resuming %s, which a stop or restart of this node interrupted (time %d of at most %d in a row)", req.Resumes, req.ResumeCount, n.cfg.HF.Resumes)
		}
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
