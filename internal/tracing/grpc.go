package tracing

import (
	"context"
	"errors"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// mdCarrier carries the trace context in gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// clientSpan starts a client span for method and puts the trace context
// into the outgoing metadata; a call outside any trace (the cluster's
// own traffic: stats streams, raft forwards) gets none (nil span).
func (t *Tracer) clientSpan(ctx context.Context, method string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	ctx, span := t.tr.Start(ctx, method[1:], trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", method)))
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	t.prop.Inject(ctx, mdCarrier(md))
	return metadata.NewOutgoingContext(ctx, md), span
}

// serverSpan continues the trace in the incoming metadata with a server
// span for method; generations run under it report their phases to it.
// A call that carries no trace gets no span (nil).
func (t *Tracer) serverSpan(ctx context.Context, method string) (context.Context, trace.Span) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = t.prop.Extract(ctx, mdCarrier(md))
	}
	if !trace.SpanContextFromContext(ctx).IsRemote() {
		return ctx, nil
	}
	ctx, span := t.tr.Start(ctx, method[1:], trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", method)))
	return t.WithPhases(ctx), span
}

func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, status.Convert(err).Message())
	}
	span.End()
}

// DialOptions are the client interceptors for calls to peers (none when
// off).
func (t *Tracer) DialOptions() []grpc.DialOption {
	if t == nil {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			ctx, span := t.clientSpan(ctx, method)
			err := invoker(ctx, method, req, reply, cc, opts...)
			endSpan(span, err)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			ctx, span := t.clientSpan(ctx, method)
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || span == nil {
				endSpan(span, err)
				return s, err
			}
			cs := &tracedClientStream{ClientStream: s, span: span}
			// The span ends when the stream does: a receive fails (io.EOF
			// at its normal end) or the caller's context ends.
			cs.stop = context.AfterFunc(ctx, func() { cs.end(nil) })
			return cs, nil
		}),
	}
}

// ServerOptions are the server interceptors (none when off).
func (t *Tracer) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			ctx, span := t.serverSpan(ctx, info.FullMethod)
			resp, err := handler(ctx, req)
			endSpan(span, err)
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			ctx, span := t.serverSpan(ss.Context(), info.FullMethod)
			err := handler(srv, &tracedStream{ServerStream: ss, ctx: ctx})
			endSpan(span, err)
			return err
		}),
	}
}

type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tracedStream) Context() context.Context { return s.ctx }

type tracedClientStream struct {
	grpc.ClientStream
	span trace.Span
	stop func() bool
	once sync.Once
}

func (s *tracedClientStream) end(err error) {
	s.once.Do(func() { endSpan(s.span, err) })
}

// RecvMsg ends the span at the stream's end (stop is set before the
// caller has the stream; the context's callback only calls end).
func (s *tracedClientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.stop()
		failed := err
		if errors.Is(err, io.EOF) {
			failed = nil
		}
		s.end(failed)
	}
	return err
}
