package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"fusion/cluster/enginepb"
	"fusion/engine"
	"fusion/engine/prompt"
)

// Client is an engine.Generator that runs everything on one peer.
type Client struct {
	addr string
	conn *grpc.ClientConn
	pb   enginepb.EngineClient
	// events is the buffer of each generation's channel.
	events int
}

// Dial returns a client of the peer at addr. The connection is made on
// first use. Without options it is plaintext; opts are applied after that
// default, so transport credentials and interceptors given here win.
func Dial(addr string, opts ...grpc.DialOption) (*Client, error) {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A peer that restarts is dialed again within seconds, not the
		// default two minutes of backoff.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second,
		}, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(DefaultMaxMessageBytes), grpc.MaxCallRecvMsgSize(DefaultMaxMessageBytes)),
	}, opts...)
	conn, err := grpc.NewClient(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("remote: dial %s: %w", addr, err)
	}
	return &Client{addr: addr, conn: conn, pb: enginepb.NewEngineClient(conn), events: 16}, nil
}

// Addr is the peer's address.
func (c *Client) Addr() string { return c.addr }

// Conn is the client's connection, for other services of the peer's
// gRPC server (they share its auth and TLS).
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Generate forwards req to the peer. It returns once the peer admitted it
// (or refused it, with the peer's typed error, or could not be reached:
// an *UnreachableError, which is engine.ErrUnavailable). Events then
// arrive on the channel; a stream that breaks before the final event ends
// with an event whose Err is an *UnreachableError. Cancelling ctx cancels
// the call, which stops the generation on the peer.
func (c *Client) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	_, events, err := c.GenerateOn(ctx, req)
	return events, err
}

// GenerateOn is Generate that also returns the id of the node running the
// request, as the peer reported it.
func (c *Client) GenerateOn(ctx context.Context, req *engine.Request) (string, <-chan engine.Event, error) {
	p, err := RequestToPB(req)
	if err != nil {
		return "", nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	stream, err := c.pb.Generate(cctx, p)
	if err != nil {
		cancel()
		return "", nil, fromCall(ctx, c.addr, err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		return "", nil, fromCall(ctx, c.addr, err)
	}
	acc := first.GetAccepted()
	if acc == nil {
		cancel()
		return "", nil, &UnreachableError{Addr: c.addr, Err: errors.New("protocol error: the first message is not an acceptance")}
	}
	out := make(chan engine.Event, c.events)
	go func() {
		defer close(out)
		defer cancel()
		for {
			var ev engine.Event
			msg, err := stream.Recv()
			switch {
			case err == nil && msg.GetEvent() != nil:
				ev = EventFromPB(msg.GetEvent())
			case err == nil:
				ev = engine.Event{Done: true, Err: &UnreachableError{Addr: c.addr, Err: errors.New("protocol error: a second acceptance")}}
			case errors.Is(err, io.EOF):
				ev = engine.Event{Done: true, Err: &UnreachableError{Addr: c.addr, Err: errors.New("the stream ended before the final event")}}
			default:
				if ctx.Err() != nil {
					return // the caller left; nobody reads
				}
				ev = engine.Event{Done: true, Err: fromCall(ctx, c.addr, err)}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Done || ev.Err != nil {
				return
			}
		}
	}()
	return acc.GetNodeId(), out, nil
}

// Models lists the peer's models.
func (c *Client) Models(ctx context.Context) ([]engine.ModelInfo, error) {
	rep, err := c.pb.Models(ctx, &enginepb.ModelsRequest{})
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	out := make([]engine.ModelInfo, len(rep.GetModels()))
	for i, m := range rep.GetModels() {
		out[i] = modelFromPB(m)
	}
	return out, nil
}

// Tokenize renders and tokenizes on the peer.
func (c *Client) Tokenize(ctx context.Context, model string, req prompt.Request) (prompt.Result, error) {
	p, err := promptRequestToPB(model, req)
	if err != nil {
		return prompt.Result{}, err
	}
	rep, err := c.pb.Tokenize(ctx, p)
	if err != nil {
		return prompt.Result{}, fromCall(ctx, c.addr, err)
	}
	ids := ints(rep.GetTokens())
	if ids == nil {
		ids = []int{}
	}
	return prompt.Result{Tokens: ids, Count: len(ids), Prompt: rep.GetPrompt()}, nil
}

// CountTokens counts the prompt tokens of req on the peer.
func (c *Client) CountTokens(ctx context.Context, model string, req prompt.Request) (int, error) {
	p, err := promptRequestToPB(model, req)
	if err != nil {
		return 0, err
	}
	rep, err := c.pb.CountTokens(ctx, p)
	if err != nil {
		return 0, fromCall(ctx, c.addr, err)
	}
	return int(rep.GetCount()), nil
}

// Detokenize turns ids into text on the peer.
func (c *Client) Detokenize(ctx context.Context, model string, ids []int) (string, error) {
	p, err := int32s("tokens", ids)
	if err != nil {
		return "", err
	}
	rep, err := c.pb.Detokenize(ctx, &enginepb.DetokenizeRequest{Model: model, Tokens: p})
	if err != nil {
		return "", fromCall(ctx, c.addr, err)
	}
	return rep.GetText(), nil
}

// Embed computes embeddings on the peer.
func (c *Client) Embed(ctx context.Context, req *engine.EmbedRequest) (*engine.EmbedResult, error) {
	p, err := embedRequestToPB(req)
	if err != nil {
		return nil, err
	}
	rep, err := c.pb.Embed(ctx, p)
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	return embedResultFromPB(rep), nil
}

// Rerank scores documents on the peer.
func (c *Client) Rerank(ctx context.Context, req *engine.RerankRequest) (*engine.RerankResult, error) {
	rep, err := c.pb.Rerank(ctx, &enginepb.RerankRequest{Model: req.Model, Query: req.Query, Documents: req.Documents, NoTruncate: req.NoTruncate})
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	return rerankResultFromPB(rep), nil
}

// Transcribe transcribes speech on the peer, handing each segment to
// req.OnSegment as it arrives.
func (c *Client) Transcribe(ctx context.Context, req *engine.TranscribeRequest) (*engine.TranscribeResult, error) {
	stream, err := c.pb.Transcribe(ctx, transcribeRequestToPB(req))
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	for {
		rep, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %s ended the transcription without a result", engine.ErrUnavailable, c.addr)
			}
			return nil, fromCall(ctx, c.addr, err)
		}
		if rep.GetDone() {
			return transcribeResultFromPB(rep), nil
		}
		if s := rep.GetSegment(); s != nil && req.OnSegment != nil {
			req.OnSegment(transcribeSegmentFromPB(s))
		}
	}
}

// GenerateImage makes images on the peer, handing each step to
// req.OnStep as it arrives. The images come one message each (a message
// stays under the size limit for any image the limits allow).
func (c *Client) GenerateImage(ctx context.Context, req *engine.ImageRequest) (*engine.ImageResult, error) {
	stream, err := c.pb.GenerateImage(ctx, imageRequestToPB(req))
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	res := &engine.ImageResult{}
	for {
		rep, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %s ended the image generation without a result", engine.ErrUnavailable, c.addr)
			}
			return nil, fromCall(ctx, c.addr, err)
		}
		res.PNG = append(res.PNG, rep.GetPng()...)
		switch {
		case rep.GetDone():
			return res, nil
		case rep.GetSteps() > 0 && req.OnStep != nil:
			req.OnStep(engine.ImageStep{Image: int(rep.GetImage()), Step: int(rep.GetStep()), Steps: int(rep.GetSteps()),
				Preview: rep.GetPreview(), Partial: int(rep.GetPartial())})
		}
	}
}

// ImageFile fetches a url result kept on the peer:
// engine.ErrImageFileNotFound when it does not have it.
func (c *Client) ImageFile(ctx context.Context, id string) (*engine.ImageFile, error) {
	rep, err := c.pb.ImageFile(ctx, &enginepb.ImageFileRequest{Id: id})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("%w: %s on %s", engine.ErrImageFileNotFound, id, c.addr)
	}
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	return &engine.ImageFile{Data: rep.GetData(), ContentType: rep.GetContentType(), Expires: time.Unix(rep.GetExpiresUnix(), 0)}, nil
}

var (
	_ engine.ImageGenerator = (*Client)(nil)
	_ engine.Embedder       = (*Client)(nil)
	_ engine.Reranker       = (*Client)(nil)
	_ engine.Transcriber    = (*Client)(nil)
)

// PeerStats is one report of a peer's live figures.
type PeerStats struct {
	NodeID string
	At     time.Time
	Stats
}

// WatchStats calls fn with each report of the peer's Stats stream
// (interval 0: the peer's default) until ctx is done or the stream
// breaks; it returns the reason (nil when ctx ended it).
func (c *Client) WatchStats(ctx context.Context, interval time.Duration, fn func(PeerStats)) error {
	stream, err := c.pb.Stats(ctx, &enginepb.StatsRequest{IntervalMs: interval.Milliseconds()})
	if err != nil {
		return fromCall(ctx, c.addr, err)
	}
	for {
		rep, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fromCall(ctx, c.addr, err)
		}
		fn(PeerStats{NodeID: rep.GetNodeId(), At: time.UnixMilli(rep.GetUnixMs()), Stats: Stats{
			InFlight: rep.GetInFlight(), Queued: rep.GetQueued(), KVBytes: rep.GetKvBytes(),
			FreeMemoryBytes: rep.GetFreeMemoryBytes(), TokensPerSecond: rep.GetTokensPerSecond()}})
	}
}

var _ engine.Generator = (*Client)(nil)

// Pool keeps one client per peer address. It is safe for concurrent use.
type Pool struct {
	opts []grpc.DialOption

	mu      sync.Mutex
	clients map[string]*Client
	closed  bool
}

// NewPool returns a pool whose clients dial with opts (see Dial).
func NewPool(opts ...grpc.DialOption) *Pool {
	return &Pool{opts: opts, clients: map[string]*Client{}}
}

// ErrPoolClosed is returned by a closed pool.
var ErrPoolClosed = errors.New("remote: pool closed")

// Client returns the client of the peer at addr, dialing it on first use.
func (p *Pool) Client(addr string) (*Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	if c, ok := p.clients[addr]; ok {
		return c, nil
	}
	c, err := Dial(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	p.clients[addr] = c
	return c, nil
}

// Engine is Client as an engine.Generator (the dispatcher's connector).
func (p *Pool) Engine(addr string) (engine.Generator, error) {
	c, err := p.Client(addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Forget closes and drops the client of addr (a peer that left).
func (p *Pool) Forget(addr string) {
	p.mu.Lock()
	c := p.clients[addr]
	delete(p.clients, addr)
	p.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// Close closes every client.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for addr, c := range p.clients {
		errs = append(errs, c.Close())
		delete(p.clients, addr)
	}
	return errors.Join(errs...)
}

// Speak synthesizes speech on the peer, handing each sentence's audio to
// req.OnAudio as it arrives.
func (c *Client) Speak(ctx context.Context, req *engine.SpeechRequest) (*engine.SpeechResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.pb.Speak(ctx, &enginepb.SpeechRequest{Model: req.Model, Input: req.Input, Voice: req.Voice, Speed: req.Speed})
	if err != nil {
		return nil, fromCall(ctx, c.addr, err)
	}
	for {
		rep, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %s ended the speech without a result", engine.ErrUnavailable, c.addr)
			}
			return nil, fromCall(ctx, c.addr, err)
		}
		if rep.GetDone() {
			return &engine.SpeechResult{SampleRate: int(rep.GetSampleRate()), Samples: int(rep.GetSamples())}, nil
		}
		if req.OnAudio != nil {
			if err := req.OnAudio(engine.SpeechAudio{SampleRate: int(rep.GetSampleRate()), PCM: pcmFromBytes(rep.GetPcm())}); err != nil {
				return nil, err
			}
		}
	}
}

var _ engine.Speaker = (*Client)(nil)
