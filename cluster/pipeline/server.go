package pipeline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "fusion/cluster/pipelinepb"
	"fusion/engine/model"
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
// each release passed down. The KV of the stream's sequences is freed when it ends.
func (s *Server) Run(stream pb.Pipeline_RunServer) error {
	var (
		st    Stage
		held  bool
		name  string
		next  *Client
		seqs  = map[uint64]*model.Sequence{}
		spans = map[uint64]*seqSpan{} // the traced sequences'
		smp   runner.StageSamplers    // the last stage's
	)
	defer func() {
		for _, q := range seqs {
			q.Close()
		}
		for _, sp := range spans {
			sp.finish()
		}
		s.live.Add(-int64(len(seqs)))
		if next != nil {
			_ = next.Close()
		}
		if held && st.Release != nil {
			st.Release()
		}
	}()
	for {
		req, err := recvWhole(stream)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
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
		if len(req.Seqs) == 0 {
			continue
		}
		reply, err := s.step(stream, st, next, seqs, spans, &smp, req)
		if err != nil {
			return err
		}
		parts := chunks(reply.Logits, s.chunk)
		for i, part := range parts {
			m := &pb.StepReply{Step: reply.Step, Logits: part, More: i < len(parts)-1}
			if i == 0 {
				m.Vocab, m.Drawn = reply.Vocab, reply.Drawn
			}
			if err := stream.Send(m); err != nil {
				return err
			}
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
	limit := uint64(req.Rows) * uint64(req.Cols) * 4
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

// step runs one step through this stage and the ones after it (on the
// last, the draws it asks for).
func (s *Server) step(stream pb.Pipeline_RunServer, st Stage, next *Client, seqs map[uint64]*model.Sequence, spans map[uint64]*seqSpan, smp *runner.StageSamplers, req *pb.StepRequest) (*pb.StepReply, error) {
	ctx := stream.Context()
	h, err := hidden(req.Rows, req.Cols, req.Dtype, req.Hidden)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	in := make([]model.Input, len(req.Seqs))
	down := make([]runner.StageSeq, len(req.Seqs))
	for i, sq := range req.Seqs {
		q := seqs[sq.Id]
		switch {
		case q == nil && sq.MaxLen == 0:
			return nil, status.Errorf(codes.InvalidArgument, "pipeline: sequence %d is not on this stream", sq.Id)
		case q != nil && sq.MaxLen != 0:
			return nil, status.Errorf(codes.InvalidArgument, "pipeline: sequence %d started twice", sq.Id)
		case q == nil:
			if q, err = st.Model.NewSequence(int(sq.MaxLen)); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "pipeline: sequence %d: %v", sq.Id, err)
			}
			seqs[sq.Id] = q
			s.live.Add(1)
		}
		in[i] = model.Input{Seq: q, Len: int(sq.Len)}
		if down[i], err = decodeSeq(sq); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if sq.MaxLen != 0 {
			if sp := s.startSeqSpan(sq.Traceparent, st, req.Model); sp != nil {
				spans[sq.Id] = sp
				down[i].Trace = sp.traceparent // the next stage's span is this one's child
			}
		}
	}
	began := time.Now()
	out, err := st.Model.Forward(ctx, in, model.Range{}, h)
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
		return nil, status.Error(code, err.Error())
	}
	var res []runner.StageResult
	if next != nil {
		if res, err = next.Step(ctx, down, out.Hidden); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	} else if res, err = smp.Step(down, out.Logits); err != nil {
		code := codes.Internal
		if runner.IsBadStep(err) {
			code = codes.InvalidArgument
		}
		return nil, status.Error(code, err.Error())
	}
	reply := &pb.StepReply{Step: req.Step}
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
			return nil, status.Error(codes.Internal, fmt.Sprintf("pipeline: logits of %d and %d values", len(r.Logits), reply.Vocab))
		}
		flat = append(flat, r.Logits...)
	}
	reply.Logits = encodeF32(flat)
	return reply, nil
}
