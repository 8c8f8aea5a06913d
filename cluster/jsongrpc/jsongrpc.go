// Package jsongrpc carries JSON over gRPC for the cluster's small internal
// services (MCP forwarding, admin calls): a method's request and reply are
// JSON documents in a protobuf BytesValue, so such a service is a Go
// struct and a grpc.ServiceDesc, with no .proto to generate, and it runs
// on the member's gRPC server with its authentication and TLS.
package jsongrpc

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Unary adapts fn to a unary method handler of a service whose
// implementation is an S: the request is decoded from JSON into a Req (an
// empty body leaves it zero), the reply encoded as JSON, and the server's
// interceptors run around it.
func Unary[S, Req, Rep any](method string, fn func(S, context.Context, *Req) (*Rep, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			var r Req
			if b := req.(*wrapperspb.BytesValue).GetValue(); len(b) > 0 {
				if err := json.Unmarshal(b, &r); err != nil {
					return nil, fmt.Errorf("%s: bad request: %w", method, err)
				}
			}
			rep, err := fn(srv.(S), ctx, &r)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(rep)
			if err != nil {
				return nil, err
			}
			return wrapperspb.Bytes(b), nil
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

// Invoke calls a JSON method on the peer behind conn: req encoded, the
// reply decoded into rep.
func Invoke(ctx context.Context, conn grpc.ClientConnInterface, method string, req, rep any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	out := new(wrapperspb.BytesValue)
	if err := conn.Invoke(ctx, method, wrapperspb.Bytes(b), out); err != nil {
		return err
	}
	if err := json.Unmarshal(out.GetValue(), rep); err != nil {
		return fmt.Errorf("%s: bad reply: %w", method, err)
	}
	return nil
}
