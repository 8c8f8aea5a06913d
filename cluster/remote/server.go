package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fusion/cluster/enginepb"
	"fusion/engine"
)

// Stats are a node's live figures, as peers see them.
type Stats struct {
	InFlight        int64 // admitted generations not yet finished
	Queued          int64 // generations waiting for their turn
	KVBytes         int64 // KV cache in use
	FreeMemoryBytes int64 // memory the node could still use
	TokensPerSecond float64
}

// Stats stream intervals.
const (
	DefaultStatsInterval = time.Second
	MinStatsInterval     = 100 * time.Millisecond
	MaxStatsInterval     = time.Minute
)

// ServerConfig configures the Engine service.
type ServerConfig struct {
	// NodeID is this node's id, reported to callers as the node that runs
	// their requests.
	NodeID string
	// Engine runs the requests (the node's local engine, never a
	// dispatcher: a forwarded request is not forwarded again).
	Engine engine.Generator
	// Stats gives the live figures for the Stats stream; nil reports
	// zeros.
	Stats func() Stats
	// StatsInterval is the default interval of the Stats stream (1 s).
	StatsInterval time.Duration
	// MaxMessageBytes bounds one received message (default 64 MiB: a
	// forwarded request is a whole HTTP body, up to its own limit).
	MaxMessageBytes int
	// ImageFiles gives the url results of image generations this node
	// answered, for the ImageFile rpc; nil has none.
	ImageFiles ImageFileSource
	Logger     *slog.Logger
}

// ImageFileSource is where a node keeps its url results of image
// generations (the OpenAI handler's store).
type ImageFileSource interface {
	ImageFile(id string) (engine.ImageFile, bool)
}

// DefaultMaxMessageBytes is the default message size limit both ways.
const DefaultMaxMessageBytes = 64 << 20

// Service implements enginepb.EngineServer over an engine.Generator.
type Service struct {
	enginepb.UnimplementedEngineServer
	cfg ServerConfig
}

// NewService returns the Engine service; register it on any grpc.Server
// with enginepb.RegisterEngineServer (Serve does all of it).
func NewService(cfg ServerConfig) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatsInterval <= 0 {
		cfg.StatsInterval = DefaultStatsInterval
	}
	return &Service{cfg: cfg}
}

// Server is a gRPC server with the Engine service on a listener.
type Server struct {
	grpc *grpc.Server
	lis  net.Listener
	done chan error
}

// Listen binds addr ("127.0.0.1:0" picks a port) and registers the Engine
// service on a new grpc.Server built with opts (the cluster's auth
// interceptors and TLS credentials go there). More services can be
// registered on GRPC() before Serve.
func Listen(addr string, cfg ServerConfig, opts ...grpc.ServerOption) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(cfg.MaxMessageBytes)}, opts...)
	s := &Server{grpc: grpc.NewServer(opts...), lis: lis, done: make(chan error, 1)}
	enginepb.RegisterEngineServer(s.grpc, NewService(cfg))
	return s, nil
}

// GRPC is the underlying server, to register other services on.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Serve serves in the background until Stop.
func (s *Server) Serve() {
	go func() { s.done <- s.grpc.Serve(s.lis) }()
}

// Stop waits for calls in flight until ctx is done, then cancels them
// (their generations stop) and closes the listener.
func (s *Server) Stop(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}
	select {
	case err := <-s.done:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	default:
		return nil // never served
	}
}

// Generate runs a forwarded request on the local engine.
func (s *Service) Generate(p *enginepb.Request, stream grpc.ServerStreamingServer[enginepb.GenerateReply]) error {
	req, err := RequestFromPB(p)
	if err != nil {
		return statusOf(err)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	events, err := s.cfg.Engine.Generate(ctx, req)
	if err != nil {
		return statusOf(err)
	}
	// Whatever happens below, the engine must not block on a reader that
	// left: cancel it and drain.
	defer func() {
		cancel()
		for range events {
		}
	}()
	accepted := &enginepb.GenerateReply{Kind: &enginepb.GenerateReply_Accepted{Accepted: &enginepb.Accepted{NodeId: s.cfg.NodeID}}}
	if err := stream.Send(accepted); err != nil {
		return err
	}
	for ev := range events {
		if err := stream.Send(&enginepb.GenerateReply{Kind: &enginepb.GenerateReply_Event{Event: EventToPB(ev)}}); err != nil {
			s.cfg.Logger.Debug("forwarded generation: caller went away", "request_id", req.ID, "err", err)
			return err
		}
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

// Tokenize renders and tokenizes on the local engine.
func (s *Service) Tokenize(ctx context.Context, p *enginepb.TokenizeRequest) (*enginepb.TokenizeReply, error) {
	req, err := promptRequestFromPB(p)
	if err != nil {
		return nil, statusOf(err)
	}
	res, err := s.cfg.Engine.Tokenize(ctx, p.GetModel(), req)
	if err != nil {
		return nil, statusOf(err)
	}
	ids, err := int32s("tokens", res.Tokens)
	if err != nil {
		return nil, statusOf(err)
	}
	return &enginepb.TokenizeReply{Tokens: ids, Prompt: res.Prompt}, nil
}

// CountTokens is Tokenize without the ids.
func (s *Service) CountTokens(ctx context.Context, p *enginepb.TokenizeRequest) (*enginepb.CountTokensReply, error) {
	req, err := promptRequestFromPB(p)
	if err != nil {
		return nil, statusOf(err)
	}
	res, err := s.cfg.Engine.Tokenize(ctx, p.GetModel(), req)
	if err != nil {
		return nil, statusOf(err)
	}
	return &enginepb.CountTokensReply{Count: clampInt32(res.Count)}, nil
}

// Detokenize turns ids into text on the local engine.
func (s *Service) Detokenize(ctx context.Context, p *enginepb.DetokenizeRequest) (*enginepb.DetokenizeReply, error) {
	text, err := s.cfg.Engine.Detokenize(ctx, p.GetModel(), ints(p.GetTokens()))
	if err != nil {
		return nil, statusOf(err)
	}
	return &enginepb.DetokenizeReply{Text: text}, nil
}

// Embed computes embeddings on the local engine.
func (s *Service) Embed(ctx context.Context, p *enginepb.EmbedRequest) (*enginepb.EmbedReply, error) {
	emb, ok := s.cfg.Engine.(engine.Embedder)
	if !ok {
		return nil, statusOf(fmt.Errorf("%w: this node's engine does not compute embeddings", engine.ErrUnavailable))
	}
	res, err := emb.Embed(ctx, embedRequestFromPB(p))
	if err != nil {
		return nil, statusOf(err)
	}
	return embedResultToPB(res), nil
}

// Rerank scores documents on the local engine.
func (s *Service) Rerank(ctx context.Context, p *enginepb.RerankRequest) (*enginepb.RerankReply, error) {
	rr, ok := s.cfg.Engine.(engine.Reranker)
	if !ok {
		return nil, statusOf(fmt.Errorf("%w: this node's engine does not rerank", engine.ErrUnavailable))
	}
	res, err := rr.Rerank(ctx, &engine.RerankRequest{Model: p.GetModel(), Query: p.GetQuery(), Documents: p.GetDocuments(), NoTruncate: p.GetNoTruncate()})
	if err != nil {
		return nil, statusOf(err)
	}
	return rerankResultToPB(res), nil
}

// Transcribe transcribes speech on the local engine, sending each
// segment as it is decoded, then the result.
func (s *Service) Transcribe(p *enginepb.TranscribeRequest, stream grpc.ServerStreamingServer[enginepb.TranscribeReply]) error {
	t, ok := s.cfg.Engine.(engine.Transcriber)
	if !ok {
		return statusOf(fmt.Errorf("%w: this node's engine does not transcribe", engine.ErrUnavailable))
	}
	req := transcribeRequestFromPB(p)
	var sendErr error
	req.OnSegment = func(seg engine.TranscribeSegment) {
		if sendErr == nil {
			sendErr = stream.Send(&enginepb.TranscribeReply{Segment: transcribeSegmentToPB(seg)})
		}
	}
	res, err := t.Transcribe(stream.Context(), req)
	if err != nil {
		return statusOf(err)
	}
	if sendErr != nil {
		return sendErr
	}
	out := transcribeResultToPB(res)
	out.Done = true
	return stream.Send(out)
}

// Speak synthesizes speech on the local engine, sending each sentence's
// audio as it is made, then the result.
func (s *Service) Speak(p *enginepb.SpeechRequest, stream grpc.ServerStreamingServer[enginepb.SpeechReply]) error {
	sp, ok := s.cfg.Engine.(engine.Speaker)
	if !ok {
		return statusOf(fmt.Errorf("%w: this node's engine does not speak", engine.ErrUnavailable))
	}
	req := &engine.SpeechRequest{Model: p.GetModel(), Input: p.GetInput(), Voice: p.GetVoice(), Speed: p.GetSpeed(),
		OnAudio: func(a engine.SpeechAudio) error {
			return stream.Send(&enginepb.SpeechReply{SampleRate: int32(a.SampleRate), Pcm: pcmToBytes(a.PCM)})
		}}
	res, err := sp.Speak(stream.Context(), req)
	if err != nil {
		return statusOf(err)
	}
	return stream.Send(&enginepb.SpeechReply{SampleRate: int32(res.SampleRate), Samples: int64(res.Samples), Done: true})
}

// GenerateImage makes images on the local engine, sending each step as
// it is taken (when asked for), then each image in a message of its own,
// then done.
func (s *Service) GenerateImage(p *enginepb.ImageRequest, stream grpc.ServerStreamingServer[enginepb.ImageReply]) error {
	ig, ok := s.cfg.Engine.(engine.ImageGenerator)
	if !ok {
		return statusOf(fmt.Errorf("%w: this node's engine does not make images", engine.ErrUnavailable))
	}
	req := imageRequestFromPB(p)
	var sendErr error
	if p.GetProgress() {
		req.OnStep = func(st engine.ImageStep) {
			if sendErr == nil {
				sendErr = stream.Send(&enginepb.ImageReply{Image: int32(st.Image), Step: int32(st.Step), Steps: int32(st.Steps),
					Preview: st.Preview, Partial: int32(st.Partial)})
			}
		}
	}
	res, err := ig.GenerateImage(stream.Context(), req)
	if err != nil {
		return statusOf(err)
	}
	if sendErr != nil {
		return sendErr
	}
	for i, png := range res.PNG {
		if err := stream.Send(&enginepb.ImageReply{Image: int32(i), Png: [][]byte{png}}); err != nil {
			return err
		}
	}
	return stream.Send(&enginepb.ImageReply{Done: true})
}

// ImageFile gives a url result kept on this node; NOT_FOUND when it
// never existed or its retention time is over.
func (s *Service) ImageFile(_ context.Context, p *enginepb.ImageFileRequest) (*enginepb.ImageFileReply, error) {
	if s.cfg.ImageFiles != nil {
		if f, ok := s.cfg.ImageFiles.ImageFile(p.GetId()); ok {
			return &enginepb.ImageFileReply{Data: f.Data, ContentType: f.ContentType, ExpiresUnix: f.Expires.Unix()}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no image file %q on this node", p.GetId())
}

// Models lists the local engine's models.
func (s *Service) Models(ctx context.Context, _ *enginepb.ModelsRequest) (*enginepb.ModelsReply, error) {
	ms, err := s.cfg.Engine.Models(ctx)
	if err != nil {
		return nil, statusOf(err)
	}
	out := &enginepb.ModelsReply{NodeId: s.cfg.NodeID, Models: make([]*enginepb.ModelInfo, len(ms))}
	for i, m := range ms {
		out.Models[i] = modelToPB(m)
	}
	return out, nil
}

// Stats streams the live figures until the caller cancels.
func (s *Service) Stats(p *enginepb.StatsRequest, stream grpc.ServerStreamingServer[enginepb.StatsReport]) error {
	every := s.cfg.StatsInterval
	if ms := p.GetIntervalMs(); ms != 0 {
		every = time.Duration(ms) * time.Millisecond
		if every < MinStatsInterval || every > MaxStatsInterval {
			return status.Errorf(codes.InvalidArgument, "interval_ms %d is outside [%d, %d]", ms, MinStatsInterval.Milliseconds(), MaxStatsInterval.Milliseconds())
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var st Stats
		if s.cfg.Stats != nil {
			st = s.cfg.Stats()
		}
		rep := &enginepb.StatsReport{
			NodeId: s.cfg.NodeID, UnixMs: time.Now().UnixMilli(), InFlight: st.InFlight, Queued: st.Queued,
			KvBytes: st.KVBytes, FreeMemoryBytes: st.FreeMemoryBytes, TokensPerSecond: st.TokensPerSecond,
		}
		if err := stream.Send(rep); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-t.C:
		}
	}
}
