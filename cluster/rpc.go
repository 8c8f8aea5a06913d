package cluster

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "fusion/cluster/clusterpb"
	"fusion/cluster/fsm"
)

// ErrNoLeader means no leader could be reached within the hold timeout:
// control-plane writes are unavailable (HTTP 503 + Retry-After).
var ErrNoLeader = errors.New("cluster: no leader")

// ErrClosed means the member has been closed.
var ErrClosed = errors.New("cluster: member closed")

// ErrCommandTooLarge means a command above Config.MaxCommandBytes.
var ErrCommandTooLarge = errors.New("cluster: command too large")

// ErrInvalidCommand means a command that the FSM cannot decode.
var ErrInvalidCommand = errors.New("cluster: invalid command")

func newRequestID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Apply commits a command through the leader and returns its result. A
// missing request id is filled in so that retries (the same id) apply
// once; zero now_unix_nano fields are stamped with the leader's clock.
// The error is the Result's typed *fsm.Error, ErrNoLeader, or the context's.
func (m *Member) Apply(ctx context.Context, cmd proto.Message) (fsm.Result, error) {
	if _, ok := fsm.TypeFor(cmd); !ok {
		return fsm.Result{}, fmt.Errorf("%w: %T", ErrInvalidCommand, cmd)
	}
	if fsm.RequestID(cmd) == "" {
		fsm.SetRequestID(cmd, newRequestID())
	}
	data, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	if len(data) > m.cfg.MaxCommandBytes {
		return fsm.Result{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrCommandTooLarge, len(data), m.cfg.MaxCommandBytes)
	}
	return m.applyBytes(ctx, data)
}

func (m *Member) applyBytes(ctx context.Context, data []byte) (fsm.Result, error) {
	hold := time.Now().Add(m.cfg.HoldTimeout)
	failures := map[string]int{}
	backoff := 10 * time.Millisecond
	var lastErr error
	for {
		var (
			r   fsm.Result
			err error
		)
		if m.ctx.Err() != nil {
			return fsm.Result{}, ErrClosed
		}
		if m.raft.State() == raft.Leader {
			r, err = m.applyLocal(data)
		} else if addr := m.leaderGRPC(); addr == "" {
			err = ErrNoLeader
		} else {
			// After two failures on a pooled connection, dial afresh: a
			// restarted peer leaves every pooled connection dead.
			r, err = m.forward(ctx, addr, data, failures[addr] >= 2)
			if err != nil {
				failures[addr]++
			}
		}
		if err == nil {
			return r, r.Err
		}
		if !retryable(err) {
			return fsm.Result{}, err
		}
		lastErr = err
		if ctx.Err() != nil {
			return fsm.Result{}, ctx.Err()
		}
		if time.Now().After(hold) {
			return fsm.Result{}, fmt.Errorf("%w: %v", ErrNoLeader, lastErr)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return fsm.Result{}, ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// errRetry marks a failure that may succeed against the same or a new leader.
type errRetry struct{ err error }

func (e errRetry) Error() string { return e.err.Error() }
func (e errRetry) Unwrap() error { return e.err }

func retryable(err error) bool {
	var r errRetry
	return errors.As(err, &r) || errors.Is(err, ErrNoLeader)
}

// applyLocal proposes on this node, which must lead.
func (m *Member) applyLocal(data []byte) (fsm.Result, error) {
	if len(data) > m.cfg.MaxCommandBytes {
		return fsm.Result{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidCommand, len(data), m.cfg.MaxCommandBytes)
	}
	_, cmd, err := fsm.Decode(data)
	if err != nil {
		return fsm.Result{}, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	if stampNow(cmd, time.Now().UnixNano()) {
		if data, err = fsm.Encode(cmd); err != nil {
			return fsm.Result{}, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
		}
	}
	f := m.raft.Apply(data, m.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
			errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrEnqueueTimeout):
			return fsm.Result{}, errRetry{err}
		}
		return fsm.Result{}, fmt.Errorf("cluster: raft apply: %w", err)
	}
	r, ok := f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("cluster: raft apply returned %T", f.Response())
	}
	return r, nil
}

// stampNow fills a zero now_unix_nano with the leader's clock.
func stampNow(m proto.Message, now int64) bool {
	fd := m.ProtoReflect().Descriptor().Fields().ByName("now_unix_nano")
	if fd == nil || fd.Kind() != protoreflect.Int64Kind || m.ProtoReflect().Get(fd).Int() != 0 {
		return false
	}
	m.ProtoReflect().Set(fd, protoreflect.ValueOfInt64(now))
	return true
}

func (m *Member) leaderGRPC() string {
	_, id := m.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	return m.grpcAddrOf(string(id))
}

func (m *Member) grpcAddrOf(id string) string {
	m.mu.Lock()
	var addr string
	if p := m.peers[id]; p != nil {
		addr = p.meta.GRPC
	}
	m.mu.Unlock()
	if addr != "" {
		return addr
	}
	m.fsm.Read(func(s *fsm.State) {
		if n, ok := s.Node(id); ok {
			addr = n.GrpcAddr
		}
	})
	return addr
}

func (m *Member) forward(ctx context.Context, addr string, data []byte, fresh bool) (fsm.Result, error) {
	conn, err := m.pool.get(addr, fresh)
	if err != nil {
		return fsm.Result{}, errRetry{err}
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ApplyTimeout)
	defer cancel()
	resp, err := pb.NewClusterClient(conn).Apply(cctx, &pb.ApplyRequest{Command: data})
	if err != nil {
		switch status.Code(err) {
		case codes.Unavailable, codes.FailedPrecondition, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
			if ctx.Err() == nil {
				return fsm.Result{}, errRetry{err}
			}
			return fsm.Result{}, ctx.Err()
		case codes.InvalidArgument:
			return fsm.Result{}, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
		}
		return fsm.Result{}, fmt.Errorf("cluster: forward to %s: %w", addr, err)
	}
	return fsm.Result{
		Index: resp.Index, Err: fsm.ErrorFromCode(fsm.Code(resp.ErrorCode), resp.ErrorMessage, resp.CurrentIndex),
		Value: resp.Value, Ref: resp.Ref, Duplicate: resp.Duplicate, Ignored: resp.Ignored,
	}, nil
}

// ConsistentRead waits until the local FSM reflects every write
// acknowledged before the call (a read index from the leader), so that
// the next local read is linearizable.
func (m *Member) ConsistentRead(ctx context.Context) error {
	hold := time.Now().Add(m.cfg.HoldTimeout)
	backoff := 10 * time.Millisecond
	for {
		idx, err := m.readIndex(ctx)
		if err == nil {
			return m.fsm.WaitApplied(ctx, idx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(hold) {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

func (m *Member) readIndex(ctx context.Context) (uint64, error) {
	if m.raft.State() == raft.Leader {
		return m.localReadIndex()
	}
	addr := m.leaderGRPC()
	if addr == "" {
		return 0, ErrNoLeader
	}
	conn, err := m.pool.get(addr, false)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.ApplyTimeout)
	defer cancel()
	resp, err := pb.NewClusterClient(conn).ReadIndex(cctx, &pb.ReadIndexRequest{})
	if err != nil {
		return 0, err
	}
	return resp.Index, nil
}

// localReadIndex is the read-index protocol on the leader: record the
// commit index, confirm leadership with a quorum, and answer the index of
// the last command at or below it; a reader (the leader included) waits
// until its FSM has applied that far. The commit index, not the leader's
// FSM applied index: a follower can apply a committed write before the
// leader's FSM goroutine does, and a read there must never be followed by
// an older read here (found by TestSettingsCASLinearizable).
//
// Only in the term whose barrier this node has applied (tracked by term,
// not a flag: a node that loses leadership and wins it back before the
// leader loop notices must not answer from the old term).
func (m *Member) localReadIndex() (uint64, error) {
	term := m.raft.CurrentTerm()
	if m.readyTerm.Load() != term {
		return 0, errRetry{errors.New("cluster: leader not ready in this term")}
	}
	commit := m.raft.CommitIndex()
	if err := m.verifyLeader(); err != nil {
		return 0, err
	}
	if m.raft.CurrentTerm() != term {
		return 0, errRetry{errors.New("cluster: term changed during the read")}
	}
	return m.lastCommandAtOrBelow(commit), nil
}

// lastCommandAtOrBelow maps a raft index to the FSM's index space: the
// FSM sees only commands, not raft's no-op and configuration entries.
func (m *Member) lastCommandAtOrBelow(idx uint64) uint64 {
	var l raft.Log
	for i := idx; i > 0; i-- {
		if err := m.stores.Log.GetLog(i, &l); err != nil {
			// Compacted: everything at or below i is in a snapshot this
			// node's FSM has applied.
			return min(m.fsm.AppliedIndex(), idx)
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return 0
}

// ready reports whether this node leads with its term's barrier applied.
func (m *Member) ready() bool {
	t := m.readyTerm.Load()
	return t != 0 && t == m.raft.CurrentTerm() && m.raft.State() == raft.Leader
}

// verifyLeader bounds raft's VerifyLeader: its future can stay pending
// forever when leadership or the node goes away mid-check (seen under
// load in TestSettingsCASLinearizable). The waiting goroutine ends when
// raft answers, if ever; the caller does not wait past ApplyTimeout.
func (m *Member) verifyLeader() error {
	f := m.raft.VerifyLeader()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(m.cfg.ApplyTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errRetry{errors.New("cluster: leader verification timed out")}
	case <-m.ctx.Done():
		return errors.New("cluster: shutting down")
	}
}

// ---- the Cluster gRPC service ----

type service struct {
	pb.UnimplementedClusterServer
	m *Member
}

func (s *service) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if s.m.raft.State() != raft.Leader {
		return nil, status.Error(codes.FailedPrecondition, "cluster: not the leader")
	}
	r, err := s.m.applyLocal(req.Command)
	if err != nil {
		if errors.Is(err, ErrInvalidCommand) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &pb.ApplyResponse{Index: r.Index, Value: r.Value, Ref: r.Ref, Duplicate: r.Duplicate, Ignored: r.Ignored}
	var fe *fsm.Error
	if errors.As(r.Err, &fe) {
		resp.ErrorCode, resp.ErrorMessage, resp.CurrentIndex = uint32(fe.Code), fe.Msg, fe.CurrentIndex
	}
	return resp, nil
}

func (s *service) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	m := s.m
	f := m.raft.GetConfiguration()
	has := m.hadState || (f.Error() == nil && len(f.Configuration().Servers) > 0)
	return &pb.StatusResponse{
		NodeId: m.cfg.NodeID, LastIndex: m.raft.LastIndex(), HasState: has, LeaderId: m.Leader(),
		BootstrapExpect: uint32(m.cfg.BootstrapExpect), AppliedIndex: m.fsm.AppliedIndex(),
	}, nil
}

func (s *service) ReadIndex(ctx context.Context, _ *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	if s.m.raft.State() != raft.Leader {
		return nil, status.Error(codes.FailedPrecondition, "cluster: not the leader")
	}
	idx, err := s.m.localReadIndex()
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pb.ReadIndexResponse{Index: idx}, nil
}

// ---- connections to peers ----

type connPool struct {
	opts []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
	forced atomic.Int64
}

func newConnPool(opts []grpc.DialOption) *connPool {
	return &connPool{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

// get returns the pooled connection to addr, or a new one when fresh.
func (p *connPool) get(addr string, fresh bool) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("cluster: shutting down")
	}
	if c, ok := p.conns[addr]; ok {
		if !fresh {
			return c, nil
		}
		c.Close()
		delete(p.conns, addr)
		p.forced.Add(1)
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// ForcedNewConns counts forwarded writes retried on a fresh connection.
func (m *Member) ForcedNewConns() int64 { return m.pool.forced.Load() }
