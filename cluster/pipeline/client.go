package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	pb "fusion/cluster/pipelinepb"
	"fusion/engine/model"
	"fusion/engine/prefixcache"
	"fusion/engine/runner"
)

// Dial returns a connection to the node at a gRPC address (a pooled one).
type Dial func(addr string) (grpc.ClientConnInterface, error)

// Client is one pipeline's link to its next stage: a runner.Downstream.
// It opens the stream on the first step and keeps it; if the stream
// breaks, every step in flight and every sequence that ran on it fails
// with runner.ErrPipelineStage (retryable), and the next new sequence
// opens a fresh stream.
type Client struct {
	model      string
	generation uint64
	addr       string
	dial       Dial

	mu      sync.Mutex // guards the stream and sends on it
	stream  pb.Pipeline_RunClient
	cancel  context.CancelFunc
	readerW sync.WaitGroup
	seqs    map[uint64]bool // sequences the current stream has seen
	step    uint64
	closed  bool
	chunk   int // payload bytes per message (ChunkBytes)

	rmu     sync.Mutex // guards pending
	pending map[uint64]chan result

	// Hidden-state rows (tokens) sent down, their encoded bytes, and the
	// wire dtypes they went in (wireBF16, wireF32 bits).
	wireRows, wireBytes atomic.Int64
	wireDTypes          atomic.Uint32
}

const (
	wireF32 uint32 = 1 << iota
	wireBF16
)

// DTypeMixed is WireStats.DType when a link sent steps in both dtypes.
const DTypeMixed = "mixed"

// WireStats is what a link has sent down.
type WireStats struct {
	// Rows are the hidden-state rows (one per token position) sent and
	// Bytes their size as encoded: Bytes / Rows is the hop's cost per
	// token (hidden × 2 for bf16 activations, × 4 for f32).
	Rows, Bytes int64
	// DType is the wire dtype every step went in (DTypeF32, DTypeBF16),
	// DTypeMixed when steps went in both, "" before the first.
	DType string
}

// Wire is what this client has sent down its link (steps whose send
// failed are not counted).
func (c *Client) Wire() WireStats {
	w := WireStats{Rows: c.wireRows.Load(), Bytes: c.wireBytes.Load()}
	switch c.wireDTypes.Load() {
	case wireF32:
		w.DType = DTypeF32
	case wireBF16:
		w.DType = DTypeBF16
	case wireF32 | wireBF16:
		w.DType = DTypeMixed
	}
	return w
}

type result struct {
	reply *pb.StepReply
	err   error
}

// NewClient makes the link from a stage to the stage at addr for model's
// placement generation. Nothing is dialled before the first step.
func NewClient(model string, generation uint64, addr string, dial Dial) *Client {
	return &Client{model: model, generation: generation, addr: addr, dial: dial, seqs: map[uint64]bool{}, pending: map[uint64]chan result{},
		chunk: ChunkBytes}
}

var (
	_ runner.Starter  = (*Client)(nil)
	_ runner.Prefixer = (*Client)(nil)
)

// Restore implements runner.Prefixer: a Prefix message, answered when
// every later stage has opened the sequence.
func (c *Client) Restore(ctx context.Context, id uint64, maxLen int, keys []prefixcache.Key, block, limit int) (int, error) {
	wait, err := c.startRestore(ctx, id, maxLen, keys, block, limit)
	if err != nil {
		return 0, err
	}
	return wait()
}

// startRestore sends a Prefix; wait takes the positions every later stage
// restored.
func (c *Client) startRestore(ctx context.Context, id uint64, maxLen int, keys []prefixcache.Key, block, limit int) (func() (int, error), error) {
	req := &pb.StepRequest{Model: c.model, Generation: c.generation,
		Prefix: &pb.Prefix{Id: id, MaxLen: uint32(maxLen), Block: uint32(block), Limit: uint32(limit), Keys: keyBytes(keys)}}
	ch, err := c.send(req, []runner.StageSeq{{ID: id, MaxLen: maxLen}})
	if err != nil {
		return nil, err
	}
	return func() (int, error) {
		select {
		case r := <-ch:
			if r.err != nil {
				return 0, r.err
			}
			if int(r.reply.Restored) > limit {
				return 0, fmt.Errorf("%w: %d positions restored of at most %d", runner.ErrPipelineStage, r.reply.Restored, limit)
			}
			return int(r.reply.Restored), nil
		case <-ctx.Done():
			c.rmu.Lock()
			delete(c.pending, req.Step)
			c.rmu.Unlock()
			c.Free([]uint64{id})
			return 0, ctx.Err()
		}
	}, nil
}

// Save implements runner.Prefixer.
func (c *Client) Save(id uint64, block, first int, keys []prefixcache.Key) {
	c.saves([]*pb.Save{{Id: id, Block: uint32(block), First: uint32(first), Keys: keyBytes(keys)}})
}

// saves sends Save messages down (on a live stream, for sequences it has
// seen; best effort).
func (c *Client) saves(saves []*pb.Save) {
	c.mu.Lock()
	defer c.mu.Unlock()
	saves = slices.DeleteFunc(slices.Clone(saves), func(s *pb.Save) bool { return !c.seqs[s.Id] || len(s.Keys) == 0 })
	if c.stream == nil || len(saves) == 0 {
		return
	}
	_ = c.stream.Send(&pb.StepRequest{Model: c.model, Generation: c.generation, Saves: saves})
}

func keyBytes(keys []prefixcache.Key) [][]byte {
	out := make([][]byte, len(keys))
	for i := range keys {
		out[i] = keys[i][:]
	}
	return out
}

// Step implements runner.Downstream.
func (c *Client) Step(ctx context.Context, seqs []runner.StageSeq, h *model.Hidden) ([]runner.StageResult, error) {
	wait, err := c.Start(ctx, seqs, h)
	if err != nil {
		return nil, err
	}
	return wait()
}

// Start implements runner.Starter: the step is on the stream when it
// returns (steps reach the next stage in the order they were started),
// and wait takes its answer.
func (c *Client) Start(ctx context.Context, seqs []runner.StageSeq, h *model.Hidden) (func() ([]runner.StageResult, error), error) {
	dtype, data := encodeHidden(h.Data)
	req := &pb.StepRequest{Model: c.model, Generation: c.generation, Seqs: make([]*pb.Seq, len(seqs)),
		Rows: uint32(h.Rows), Cols: uint32(h.Cols), Dtype: dtype, Hidden: data}
	for i, s := range seqs {
		req.Seqs[i] = encodeSeq(s)
	}
	ch, err := c.send(req, seqs)
	if err != nil {
		return nil, err
	}
	c.wireRows.Add(int64(h.Rows))
	c.wireBytes.Add(int64(len(data)))
	bit := wireF32
	if dtype == DTypeBF16 {
		bit = wireBF16
	}
	c.wireDTypes.Or(bit)
	return func() ([]runner.StageResult, error) {
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			return results(r.reply, seqs)
		case <-ctx.Done():
			// The later stages may still take this step: the sequences are
			// out of step with them now, so they are dropped there.
			c.rmu.Lock()
			delete(c.pending, req.Step)
			c.rmu.Unlock()
			ids := make([]uint64, len(seqs))
			for i, s := range seqs {
				ids[i] = s.ID
			}
			c.Free(ids)
			return nil, ctx.Err()
		}
	}, nil
}

// send opens the stream if needed and sends one step; the reply arrives
// on the returned channel. The step is on its way to the socket when it
// returns (letTransportRun, with c.mu released).
func (c *Client) send(req *pb.StepRequest, seqs []runner.StageSeq) (chan result, error) {
	ch, err := c.sendLocked(req, seqs)
	if err == nil {
		letTransportRun()
	}
	return ch, err
}

func (c *Client) sendLocked(req *pb.StepRequest, seqs []runner.StageSeq) (chan result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("%w: the pipeline of %s was closed", runner.ErrPipelineStage, c.model)
	}
	for _, s := range seqs {
		if s.MaxLen == 0 && !c.seqs[s.ID] {
			return nil, fmt.Errorf("%w: sequence %d of %s ran on a link to %s that broke", runner.ErrPipelineStage, s.ID, c.model, c.addr)
		}
	}
	if c.stream == nil {
		if err := c.open(); err != nil {
			return nil, err
		}
	}
	for _, s := range seqs {
		c.seqs[s.ID] = true
	}
	c.step++
	req.Step = c.step
	ch := make(chan result, 1)
	c.rmu.Lock()
	c.pending[req.Step] = ch
	c.rmu.Unlock()
	if err := c.sendChunked(req); err != nil {
		// The reader sees the stream end and fails what is pending.
		c.rmu.Lock()
		delete(c.pending, req.Step)
		c.rmu.Unlock()
		return nil, fmt.Errorf("%w: %s: %v", runner.ErrPipelineStage, c.addr, err)
	}
	return ch, nil
}

// sendChunked sends req, its hidden state split over several messages
// when it exceeds ChunkBytes. Called with c.mu held.
func (c *Client) sendChunked(req *pb.StepRequest) error {
	parts := chunks(req.Hidden, c.chunk)
	for i, part := range parts {
		m := req // the first message carries the step's fields
		if i > 0 {
			m = &pb.StepRequest{Model: req.Model, Generation: req.Generation, Step: req.Step}
		}
		m.Hidden, m.More = part, i < len(parts)-1
		if err := c.stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// open starts a stream and its reader. Called with c.mu held.
func (c *Client) open() error {
	conn, err := c.dial(c.addr)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", runner.ErrPipelineStage, c.addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := pb.NewPipelineClient(conn).Run(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("%w: %s: %v", runner.ErrPipelineStage, c.addr, err)
	}
	c.stream, c.cancel = stream, cancel
	c.seqs = map[uint64]bool{}
	c.readerW.Add(1)
	go c.read(stream, cancel)
	return nil
}

// read delivers replies until the stream ends, then fails what is pending
// and forgets the stream (if it is still the current one).
func (c *Client) read(stream pb.Pipeline_RunClient, cancel context.CancelFunc) {
	defer c.readerW.Done()
	var (
		err     error
		partial *pb.StepReply // a reply whose logits continue
	)
	for {
		var r *pb.StepReply
		if r, err = stream.Recv(); err != nil {
			break
		}
		if partial != nil {
			if r.Step != partial.Step {
				err = fmt.Errorf("pipeline: step %d's logits cut by step %d", partial.Step, r.Step)
				break
			}
			partial.Logits = append(partial.Logits, r.Logits...)
			partial.More = r.More
			r = partial
		}
		if r.More {
			partial = r
			continue
		}
		partial = nil
		c.rmu.Lock()
		ch := c.pending[r.Step]
		delete(c.pending, r.Step)
		c.rmu.Unlock()
		if ch != nil {
			ch <- result{reply: r}
		}
	}
	cancel()
	c.mu.Lock()
	if c.stream == stream {
		c.stream, c.cancel = nil, nil
		c.seqs = map[uint64]bool{}
	}
	c.mu.Unlock()
	failed := fmt.Errorf("%w: %s: %v", runner.ErrPipelineStage, c.addr, err)
	c.rmu.Lock()
	for step, ch := range c.pending {
		ch <- result{err: failed}
		delete(c.pending, step)
	}
	c.rmu.Unlock()
}

// Free implements runner.Downstream.
func (c *Client) Free(ids []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var drop []uint64
	for _, id := range ids {
		if c.seqs[id] {
			delete(c.seqs, id)
			drop = append(drop, id)
		}
	}
	if c.stream == nil || len(drop) == 0 {
		return
	}
	// A failed send ends the stream; the reader cleans up.
	_ = c.stream.Send(&pb.StepRequest{Model: c.model, Generation: c.generation, Free: drop})
}

// Close ends the stream (the later stages free every sequence of it).
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	c.readerW.Wait()
	return nil
}

// results reads a reply: the drawn token of each sequence that asked for
// a draw, the logits of each that has no sampler on the last stage (rows
// in the step's order), nothing for the others.
func results(r *pb.StepReply, seqs []runner.StageSeq) ([]runner.StageResult, error) {
	v, err := decodeF32(r.Logits)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", runner.ErrPipelineStage, err)
	}
	vocab := int(r.Vocab)
	out := make([]runner.StageResult, len(seqs))
	rows, drawn := 0, 0
	for i, s := range seqs {
		switch {
		case s.Draw != nil:
			if drawn >= len(r.Drawn) || r.Drawn[drawn].Id != s.ID {
				return nil, fmt.Errorf("%w: no token came back for sequence %d", runner.ErrPipelineStage, s.ID)
			}
			d, err := decodeDrawn(r.Drawn[drawn])
			if err != nil {
				return nil, fmt.Errorf("%w: %v", runner.ErrPipelineStage, err)
			}
			out[i].Drawn = d
			drawn++
		case !sampledHere(s):
			if vocab <= 0 || len(v) < (rows+1)*vocab {
				return nil, fmt.Errorf("%w: %d logits short of sequence %d's row (vocabulary %d)", runner.ErrPipelineStage, len(v), s.ID, vocab)
			}
			out[i].Logits = v[rows*vocab : (rows+1)*vocab : (rows+1)*vocab]
			rows++
		}
	}
	if drawn != len(r.Drawn) || len(v) != rows*vocab {
		return nil, fmt.Errorf("%w: %d tokens and %d logits came back for %d draws and %d rows of %d", runner.ErrPipelineStage,
			len(r.Drawn), len(v), drawn, rows, vocab)
	}
	return out, nil
}
