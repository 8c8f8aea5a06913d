// Package keyusage is the gRPC service through which the nodes of a
// cluster tell each other how much each API sub-key has used: every node
// asks each live peer for its report a few times a second, so a key's
// rate limit holds across the cluster without a write through Raft per
// request. The report is opaque bytes here (JSON the router's limiter
// writes and reads), so this package knows nothing of keys.
package keyusage

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	serviceName  = "fusion.KeyUsage"
	methodReport = "/" + serviceName + "/Report"
)

// reporter is the service's handler type for grpc.ServiceDesc.
type reporter interface{ report() []byte }

type service struct{ fn func() []byte }

func (s service) report() []byte { return s.fn() }

// Register serves report (this node's usage) to the peers on s.
func Register(s grpc.ServiceRegistrar, report func() []byte) {
	s.RegisterService(&serviceDesc, service{fn: report})
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*reporter)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Report",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return wrapperspb.Bytes(srv.(reporter).report()), nil }
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodReport}, h)
		},
	}},
	Metadata: "cluster/keyusage",
}

// Fetch asks a peer for its report.
func Fetch(ctx context.Context, conn grpc.ClientConnInterface) ([]byte, error) {
	out := new(wrapperspb.BytesValue)
	if err := conn.Invoke(ctx, methodReport, new(wrapperspb.BytesValue), out); err != nil {
		return nil, err
	}
	return out.GetValue(), nil
}
