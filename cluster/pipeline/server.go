package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "fusion/cluster/pipelinepb"
	"fusion/engine/model"
	"fusion/engine/prefixcache"
	"fusion/engine/runner"
)

// Stage is a later stage of a pipeline held by this node.
type Stage struct {
	Generation uint64
	Model      *model.Model // only the stage's layers
	// Next is the gRPC address of the next stage; "" on the last stage,
	// which samples (or answers with logits).
	Next string
	// Live reports whether the stage is still the one placed here (nil:
	// always); a stream on a stage that is not refuses its next message.
	Live func() bool
	// Release is called once the stream that looked the stage up ended
	// and freed its sequences (the holder may close Model then).
	Release func()
	// Cache holds this stage's blocks of prompts (the pipeline's prefix
	// cache, per stage), under runner.StageBlockKey(CacheKey, chained
	// key); nil: the stage restores and saves nothing.
	Cache    *prefixcache.Cache
	CacheKey prefixcache.Key
}

// Lookup finds this node's stage of a model's pipeline and holds it for a
// stream, until Stage.Release.
type Lookup func(model string) (Stage, bool)

// Server is the Pipeline service of a node.
type Server struct {
	pb.UnimplementedPipelineServer
	lookup Lookup
	dial   Dial
	log    *slog.Logger
	live   atomic.Int64 // sequences held by all streams
	chunk  int          // payload bytes per message (ChunkBytes)
	// startSpan, when set (TraceWith), makes the spans of traced
	// sequences.
	startSpan StartSpan
	// rows are the positions this node's stages computed, restored those
	// they took from their prefix caches.
	rows, restored atomic.Int64
	// Where the streams' loops spent their time, in nanoseconds.
	steps, forwardNs, sampleNs, sendNs, idleNs atomic.Int64
}

// Counts are what this node's stages did, over every stream.
type Counts struct {
	Rows     int64 // positions computed (hidden-state rows through the layers)
	Restored int64 // positions taken from the stages' prefix caches
	Steps    int64 // steps through the layers
	// Where the streams' loops spent their time, summed over the streams
	// (each stream has one loop; a stage has one stream per pipeline):
	// Forward running the layers, Sample drawing the last stage's tokens,
	// Send handing a step on (to the next stage's stream, or its answer
	// up from the last), Idle waiting for the next message once the
	// stream had its first. A stage that is the bottleneck has little
	// Idle; one that waits on its neighbours, much.
	Forward, Sample, Send, Idle time.Duration
}

// Counts reports what this node's stages did so far.
func (s *Server) Counts() Counts {
	return Counts{Rows: s.rows.Load(), Restored: s.restored.Load(), Steps: s.steps.Load(),
		Forward: time.Duration(s.forwardNs.Load()), Sample: time.Duration(s.sampleNs.Load()),
		Send: time.Duration(s.sendNs.Load()), Idle: time.Duration(s.idleNs.Load())}
}

// since adds the time since t to a counter and returns now.
func since(c *atomic.Int64, t time.Time) time.Time {
	now := time.Now()
	c.Add(int64(now.Sub(t)))
	return now
}

// Sequences is the number of sequences whose KV this node's stages hold
// now, over every stream.
func (s *Server) Sequences() int64 { return s.live.Load() }

// Register adds the Pipeline service to a gRPC server (the member's: its
// auth and TLS apply). dial reaches the next stages.
func Register(s *grpc.Server, lookup Lookup, dial Dial, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	srv := &Server{lookup: lookup, dial: dial, log: log, chunk: ChunkBytes}
	pb.RegisterPipelineServer(s, srv)
	return srv
}

// Run serves one pipeline's stream: each step through this stage's layers
// and on to the next stage (or, on the last, to the draws it asks for),
// each release passed down. A middle stage does not wait for a step's
// answer before taking the next step: answers go back up from a goroutine
// of their own, in order, so that several micro-batches are in flight
// along the pipeline at once. The KV of the stream's sequences is freed
// when it ends.
func (s *Server) Run(stream pb.Pipeline_RunServer) error {
	var (
		st    Stage
		held  bool
		name  string
		next  *Client
		seqs  = map[uint64]*model.Sequence{}
		spans = map[uint64]*seqSpan{} // the traced sequences'
		smp   runner.StageSamplers    // the last stage's
		up    *uplink                 // a middle stage's answers on their way up
	)
	done := make(chan struct{})
	defer func() {
		close(done)
		if up != nil {
			up.close()
		}
		if next != nil {
			_ = next.Close()
		}
		if up != nil {
			up.wait()
		}
		for _, q := range seqs {
			q.Close()
		}
		for _, sp := range spans {
			sp.finish()
		}
		s.live.Add(-int64(len(seqs)))
		if held && st.Release != nil {
			st.Release()
		}
	}()
	type received struct {
		req *pb.StepRequest
		err error
	}
	reqs := make(chan received)
	go func() {
		for {
			req, err := recvWhole(stream)
			select {
			case reqs <- received{req, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var req *pb.StepRequest
		var upErr <-chan error
		if up != nil {
			upErr = up.failed
		}
		waited := time.Now()
		select {
		case r := <-reqs:
			if held {
				since(&s.idleNs, waited)
			}
			if errors.Is(r.err, io.EOF) {
				if up != nil {
					up.close()
					return up.wait()
				}
				return nil
			}
			if r.err != nil {
				return r.err
			}
			req = r.req
		case err := <-upErr:
			return err
		}
		if !held {
			if st, held = s.lookup(req.Model); !held {
				return status.Errorf(codes.NotFound, "pipeline: no stage of %q here", req.Model)
			}
			name = req.Model
			if st.Next != "" {
				next = NewClient(name, st.Generation, st.Next, s.dial)
				next.chunk = s.chunk
				up = newUplink(stream, s.chunk)
			}
		}
		switch {
		case req.Model != name:
			return status.Errorf(codes.InvalidArgument, "pipeline: model %q on a stream of %q", req.Model, name)
		case st.Generation != req.Generation || st.Live != nil && !st.Live():
			return status.Errorf(codes.FailedPrecondition, "%v: %q: the stream is at generation %d, this stage at %d (live %v)",
				ErrStale, name, req.Generation, st.Generation, st.Live == nil || st.Live())
		}
		for _, id := range req.Free {
			if q := seqs[id]; q != nil {
				if up != nil {
					up.forget(q) // a Prefix's answer may be on its way
				}
				q.Close()
				delete(seqs, id)
				s.live.Add(-1)
			}
			if sp := spans[id]; sp != nil {
				sp.finish()
				delete(spans, id)
			}
		}
		smp.Free(req.Free...)
		if next != nil && len(req.Free) > 0 {
			next.Free(req.Free)
		}
		if len(req.Saves) > 0 {
			s.save(st, seqs, req.Saves)
			if next != nil {
				next.saves(req.Saves)
			}
		}
		if req.Prefix != nil {
			if err := s.restore(stream, st, next, up, seqs, req.Step, req.Prefix); err != nil {
				return err
			}
			continue
		}
		if len(req.Seqs) == 0 {
			continue
		}
		t := time.Now()
		down, out, err := s.forward(stream.Context(), st, seqs, spans, req)
		if err != nil {
			return err
		}
		t = since(&s.forwardNs, t)
		s.steps.Add(1)
		if next != nil {
			wait, err := next.Start(stream.Context(), down, out.Hidden)
			if err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
			up.add(req.Step, down, wait) // blocks while upQueue steps are below
			since(&s.sendNs, t)
			continue
		}
		res, err := smp.Step(down, out.Logits)
		if err != nil {
			code := codes.Internal
			if runner.IsBadStep(err) {
				code = codes.InvalidArgument
			}
			return status.Error(code, err.Error())
		}
		t = since(&s.sampleNs, t)
		if err := sendReply(stream, s.chunk, req.Step, down, res); err != nil {
			return err
		}
		since(&s.sendNs, t)
	}
}

// uplink sends a middle stage's answers back up, in the order of their
// steps, as the next stage gives them.
type uplink struct {
	queue  chan upStep
	failed chan error // the first error; the stream ends with it
	ended  chan struct{}
	once   sync.Once
	err    error
	mu     sync.Mutex
	pend   map[*model.Sequence]bool // opened by a Prefix, not answered yet
}

type upStep struct {
	step uint64
	down []runner.StageSeq
	wait func() ([]runner.StageResult, error)
	// A Prefix's answer instead: the positions the stages below restored,
	// which seq keeps too.
	restored func() (int, error)
	seq      *model.Sequence
	keep     func(n int) int // makes seq hold n positions; what it holds
}

// upQueue bounds the steps in flight below a middle stage; a full queue
// holds the stream until the oldest is answered.
const upQueue = 64

func newUplink(stream pb.Pipeline_RunServer, chunk int) *uplink {
	u := &uplink{queue: make(chan upStep, upQueue), failed: make(chan error, 1), ended: make(chan struct{}), pend: map[*model.Sequence]bool{}}
	go func() {
		defer close(u.ended)
		for q := range u.queue {
			var err error
			if q.restored != nil {
				var n int
				if n, err = q.restored(); err == nil {
					// The sequence takes no step before this answer; it
					// may have been freed (the first stage gave up).
					u.mu.Lock()
					if u.pend[q.seq] {
						delete(u.pend, q.seq)
						n = q.keep(n)
					} else {
						n = 0
					}
					u.mu.Unlock()
					err = stream.Send(&pb.StepReply{Step: q.step, Restored: uint32(n)})
				} else {
					err = status.Error(codes.Unavailable, err.Error())
				}
			} else if res, werr := q.wait(); werr != nil {
				err = status.Error(codes.Unavailable, werr.Error())
			} else {
				err = sendReply(stream, chunk, q.step, q.down, res)
			}
			if err != nil {
				u.err = err
				u.failed <- err
				for range u.queue { // the stream ends: the rest fail with it
				}
				return
			}
		}
	}()
	return u
}

func (u *uplink) add(step uint64, down []runner.StageSeq, wait func() ([]runner.StageResult, error)) {
	u.queue <- upStep{step: step, down: down, wait: wait}
}

func (u *uplink) addRestore(step uint64, seq *model.Sequence, restored func() (int, error), keep func(n int) int) {
	u.mu.Lock()
	u.pend[seq] = true
	u.mu.Unlock()
	u.queue <- upStep{step: step, seq: seq, restored: restored, keep: keep}
}

// forget is called before a sequence is closed: a Prefix's answer still
// queued leaves it alone.
func (u *uplink) forget(seq *model.Sequence) {
	u.mu.Lock()
	delete(u.pend, seq)
	u.mu.Unlock()
}

// close takes no more steps; wait returns once the queued ones are
// answered (or failed), with the first error.
func (u *uplink) close()      { u.once.Do(func() { close(u.queue) }) }
func (u *uplink) wait() error { <-u.ended; return u.err }

// restore opens a sequence with what this stage's cache holds of a
// prompt's blocks, passes the Prefix on with the depth it can keep as the
// limit, and answers with the positions every stage below kept, which it
// keeps too (runner.ImportStageBlocks: a stage with recurrent layers
// stops only where a block carried its state).
func (s *Server) restore(stream pb.Pipeline_RunServer, st Stage, next *Client, up *uplink, seqs map[uint64]*model.Sequence, step uint64, p *pb.Prefix) error {
	if seqs[p.Id] != nil {
		return status.Errorf(codes.InvalidArgument, "pipeline: sequence %d started twice", p.Id)
	}
	if p.Block == 0 || uint64(p.Limit) > uint64(len(p.Keys))*uint64(p.Block) || p.Limit > p.MaxLen {
		return status.Errorf(codes.InvalidArgument, "pipeline: a prefix of %d positions in %d blocks of %d (%d positions)", p.Limit, len(p.Keys), p.Block, p.MaxLen)
	}
	chains := make([]prefixcache.Key, len(p.Keys))
	for i, kb := range p.Keys {
		if len(kb) != len(chains[i]) {
			return status.Errorf(codes.InvalidArgument, "pipeline: a block key of %d bytes", len(kb))
		}
		copy(chains[i][:], kb)
	}
	q, err := st.Model.NewSequence(int(p.MaxLen))
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "pipeline: sequence %d: %v", p.Id, err)
	}
	seqs[p.Id] = q
	s.live.Add(1)
	bs := int(p.Block)
	var imp runner.StageImport
	if st.Cache != nil {
		imp = runner.ImportStageBlocks(st.Cache, st.CacheKey, chains, st.Model, q, bs, int(p.Limit))
		if imp.Bad != nil {
			s.log.Warn("pipeline: prefix block not imported", "err", imp.Bad)
		}
	}
	if next == nil {
		s.restored.Add(int64(imp.Depth))
		return stream.Send(&pb.StepReply{Step: step, Restored: uint32(imp.Depth)})
	}
	wait, err := next.startRestore(stream.Context(), p.Id, int(p.MaxLen), chains[:(imp.Depth+bs-1)/bs], bs, imp.Depth)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	up.addRestore(step, q, wait, func(n int) int {
		if !runner.KeepStagePrefix(st.Model, q, imp.Blocks, bs, min(n, imp.Depth)) {
			return 0 // the first stage drops the sequence
		}
		s.restored.Add(int64(q.Len()))
		return q.Len()
	})
	return nil
}

// save puts blocks of the stream's sequences into this stage's cache
// (those it holds; best effort).
func (s *Server) save(st Stage, seqs map[uint64]*model.Sequence, saves []*pb.Save) {
	if st.Cache == nil || !runner.StageCacheable(st.Model) {
		return
	}
	for _, sv := range saves {
		q := seqs[sv.Id]
		bs := int(sv.Block)
		if q == nil || bs <= 0 {
			continue
		}
		for i, kb := range sv.Keys {
			b := int(sv.First) + i
			var chain prefixcache.Key
			if len(kb) != len(chain) || q.Len() < (b+1)*bs {
				break
			}
			copy(chain[:], kb)
			key := runner.StageBlockKey(st.CacheKey, chain)
			if st.Cache.Contains(key) == prefixcache.Hot {
				continue
			}
			data, err := q.ExportKV(b*bs, (b+1)*bs)
			if err != nil {
				s.log.Warn("pipeline: prefix block not exported", "block", b, "err", err)
				break
			}
			st.Cache.Put(st.CacheKey, key, bs, data)
		}
	}
}

// recvWhole receives one request, joining a hidden state sent in parts.
// The parts must belong to the same step; their total is bounded by the
// shape the first part declares.
func recvWhole(stream pb.Pipeline_RunServer) (*pb.StepRequest, error) {
	req, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	limit := uint64(req.Rows) * uint64(req.Cols) * max(dtypeBytes(req.Dtype), 4)
	for more := req.More; more; {
		part, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if part.Step != req.Step || part.Model != req.Model || part.Generation != req.Generation {
			return nil, status.Errorf(codes.InvalidArgument, "pipeline: step %d's hidden state cut by step %d", req.Step, part.Step)
		}
		if uint64(len(req.Hidden))+uint64(len(part.Hidden)) > limit {
			return nil, status.Errorf(codes.InvalidArgument, "pipeline: step %d's hidden state exceeds its [%d, %d]", req.Step, req.Rows, req.Cols)
		}
		req.Hidden = append(req.Hidden, part.Hidden...)
		more = part.More
	}
	return req, nil
}

// forward runs one step through this stage's layers; down are the
// step's sequences as the next stage (or the sampler) takes them.
func (s *Server) forward(ctx context.Context, st Stage, seqs map[uint64]*model.Sequence, spans map[uint64]*seqSpan, req *pb.StepRequest) ([]runner.StageSeq, *model.Output, error) {
	h, err := hidden(req.Rows, req.Cols, req.Dtype, req.Hidden)
	if err != nil {
		return nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	in := make([]model.Input, len(req.Seqs))
	down := make([]runner.StageSeq, len(req.Seqs))
	for i, sq := range req.Seqs {
		q := seqs[sq.Id]
		switch {
		case q == nil && sq.MaxLen == 0:
			return nil, nil, status.Errorf(codes.InvalidArgument, "pipeline: sequence %d is not on this stream", sq.Id)
		case q != nil && sq.MaxLen != 0:
			return nil, nil, status.Errorf(codes.InvalidArgument, "pipeline: sequence %d started twice", sq.Id)
		case q == nil:
			if q, err = st.Model.NewSequence(int(sq.MaxLen)); err != nil {
				return nil, nil, status.Errorf(codes.InvalidArgument, "pipeline: sequence %d: %v", sq.Id, err)
			}
			seqs[sq.Id] = q
			s.live.Add(1)
		}
		in[i] = model.Input{Seq: q, Len: int(sq.Len)}
		if down[i], err = decodeSeq(sq); err != nil {
			return nil, nil, status.Error(codes.InvalidArgument, err.Error())
		}
		// The trace rides a sequence's first step: with its maximum length,
		// or after a Prefix opened it (a prefix-cache hit).
		if spans[sq.Id] == nil && sq.Traceparent != "" {
			if sp := s.startSeqSpan(sq.Traceparent, st, req.Model); sp != nil {
				spans[sq.Id] = sp
				down[i].Trace = sp.traceparent // the next stage's span is this one's child
			}
		}
	}
	began := time.Now()
	out, err := st.Model.Forward(ctx, in, model.Range{}, h)
	s.rows.Add(int64(h.Rows))
	took := time.Since(began)
	for _, sq := range req.Seqs {
		if sp := spans[sq.Id]; sp != nil {
			sp.steps++
			sp.positions += int64(sq.Len)
			sp.forward += took
		}
	}
	if err != nil {
		code := codes.Internal
		if errors.Is(err, model.ErrBadInput) {
			code = codes.InvalidArgument
		}
		return nil, nil, status.Error(code, err.Error())
	}
	return down, out, nil
}

// sendReply sends a step's answer up: the tokens drawn and the logits of
// the sequences without a sampler, the logits in parts of at most chunk
// bytes.
func sendReply(stream pb.Pipeline_RunServer, chunk int, step uint64, down []runner.StageSeq, res []runner.StageResult) error {
	reply := &pb.StepReply{Step: step}
	var flat []float32
	for i, r := range res {
		if r.Drawn != nil {
			reply.Drawn = append(reply.Drawn, encodeDrawn(down[i].ID, r.Drawn))
		}
		if r.Logits == nil {
			continue
		}
		if reply.Vocab == 0 {
			reply.Vocab = uint32(len(r.Logits))
			flat = make([]float32, 0, len(res)*len(r.Logits))
		}
		if len(r.Logits) != int(reply.Vocab) {
			return status.Error(codes.Internal, fmt.Sprintf("pipeline: logits of %d and %d values", len(r.Logits), reply.Vocab))
		}
		flat = append(flat, r.Logits...)
	}
	parts := chunks(encodeF32(flat), chunk)
	for i, part := range parts {
		m := &pb.StepReply{Step: reply.Step, Logits: part, More: i < len(parts)-1}
		if i == 0 {
			m.Vocab, m.Drawn = reply.Vocab, reply.Drawn
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	letTransportRun()
	return nil
}
