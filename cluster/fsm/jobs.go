package fsm

import (
	"sort"

	"google.golang.org/protobuf/proto"

	pb "fusion/cluster/clusterpb"
)

// Job states. The last four are final.
const (
	JobQueued      = "queued"
	JobRunning     = "running"
	JobDone        = "done"
	JobFailed      = "failed"
	JobCancelled   = "cancelled"
	JobInterrupted = "interrupted"
)

// JobFinal reports whether a job in state st is over (no JobPut may
// change it).
func JobFinal(st string) bool {
	switch st {
	case JobDone, JobFailed, JobCancelled, JobInterrupted:
		return true
	}
	return false
}

// Limits of the jobs table, the same on every replica.
const (
	// MaxJobBytes bounds one job record: a request, a result, a log tail
	// of a few lines.
	MaxJobBytes = 32 << 10
	// MaxJobs bounds the records kept: a new job over the cap evicts the
	// oldest finished one, and is refused when every kept job still runs.
	MaxJobs = 1000
)

func validJobState(st string) bool {
	return st == JobQueued || st == JobRunning || JobFinal(st)
}

func (s *State) jobPut(c *pb.JobPut) Result {
	j := c.GetJob()
	switch {
	case j == nil || j.Id == "":
		return fail(CodeInvalid, 0, "job id is required")
	case j.Node == "" || j.Kind == "":
		return fail(CodeInvalid, 0, "job %q: node and kind are required", j.Id)
	case !validJobState(j.State):
		return fail(CodeInvalid, 0, "job %q: unknown state %q", j.Id, j.State)
	case proto.Size(j) > MaxJobBytes:
		return fail(CodeInvalid, 0, "job %q: record of %d bytes is over the limit of %d", j.Id, proto.Size(j), MaxJobBytes)
	}
	old, ok := s.jobs[j.Id]
	if ok {
		if JobFinal(old.State) {
			return fail(CodeConflict, 0, "job %q is %s", j.Id, old.State)
		}
		if old.Node != j.Node || old.Kind != j.Kind {
			return fail(CodeInvalid, 0, "job %q: node and kind may not change", j.Id)
		}
		s.jobs[j.Id] = proto.Clone(j).(*pb.Job)
		return Result{Changes: []Change{{Table: TableJobs, Kind: Updated, Key: j.Id}}}
	}
	var changes []Change
	if len(s.jobs) >= MaxJobs {
		victim := s.oldestFinishedJob()
		if victim == "" {
			return fail(CodeInvalid, 0, "%d jobs are running or queued: no room for another", len(s.jobs))
		}
		delete(s.jobs, victim)
		changes = append(changes, Change{Table: TableJobs, Kind: Deleted, Key: victim, Reason: "evicted"})
	}
	s.jobs[j.Id] = proto.Clone(j).(*pb.Job)
	return Result{Changes: append(changes, Change{Table: TableJobs, Kind: Created, Key: j.Id})}
}

// oldestFinishedJob is the finished job updated first (ties by id), ""
// when none is finished.
func (s *State) oldestFinishedJob() string {
	var best *pb.Job
	for _, j := range s.jobs {
		if !JobFinal(j.State) {
			continue
		}
		if best == nil || j.UpdatedUnixNano < best.UpdatedUnixNano ||
			(j.UpdatedUnixNano == best.UpdatedUnixNano && j.Id < best.Id) {
			best = j
		}
	}
	if best == nil {
		return ""
	}
	return best.Id
}

func (s *State) jobDelete(c *pb.JobDelete) Result {
	j, ok := s.jobs[c.Id]
	if !ok {
		return fail(CodeNotFound, 0, "job %q not found", c.Id)
	}
	if !JobFinal(j.State) {
		return fail(CodeConflict, 0, "job %q is %s: cancel it first", c.Id, j.State)
	}
	delete(s.jobs, c.Id)
	return Result{Changes: []Change{{Table: TableJobs, Kind: Deleted, Key: c.Id, Reason: "deleted"}}}
}

func (s *State) jobsInterrupt(c *pb.JobsInterrupt) Result {
	if c.Node == "" {
		return fail(CodeInvalid, 0, "node is required")
	}
	var changes []Change
	for _, id := range sortedKeys(s.jobs) {
		j := s.jobs[id]
		// A job created after the restart (same node, same clock) is
		// the new run's, even if this command commits after it.
		if j.Node != c.Node || JobFinal(j.State) || j.CreatedUnixNano > c.UnixNano {
			continue
		}
		n := proto.Clone(j).(*pb.Job)
		n.State, n.UpdatedUnixNano, n.Rate, n.EtaSeconds = JobInterrupted, c.UnixNano, 0, 0
		if n.Error == "" {
			n.Error = "the node restarted while the job ran"
		}
		s.jobs[id] = n
		changes = append(changes, Change{Table: TableJobs, Kind: Updated, Key: id})
	}
	return Result{Value: uint64(len(changes)), Changes: changes}
}

// Jobs returns every job record, newest first (by creation, then id).
func (s *State) Jobs() []*pb.Job {
	out := cloneAll(sortedValues(s.jobs, nil))
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedUnixNano > out[j].CreatedUnixNano })
	return out
}

// Job returns one job record.
func (s *State) Job(id string) (*pb.Job, bool) {
	j, ok := s.jobs[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(j).(*pb.Job), true
}
