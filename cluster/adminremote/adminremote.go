// Package adminremote carries the admin API between the nodes of a
// cluster: a node asked about another node (GET /admin/api/stats?node=b,
// a cluster-wide model list, a log stream of another node) runs the call
// on that node over the member's gRPC server, which already carries the
// cluster's authentication and TLS.
//
// The service is described by hand (grpc.ServiceDesc) over protobuf's
// BytesValue carrying JSON, as cluster/mcpremote does: the calls are the
// admin API's own JSON requests and answers, so a typed message would
// only wrap the same bytes.
package adminremote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"fusion/cluster/jsongrpc"
)

const (
	serviceName      = "fusion.admin.v1.Admin"
	methodDo         = "/" + serviceName + "/Do"
	methodFollowLogs = "/" + serviceName + "/FollowLogs"
)

// Call is an admin HTTP request for the node that receives it.
type Call struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query"`
	Body   []byte `json:"body,omitempty"`
}

// Reply is the node's HTTP answer.
type Reply struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

// Local is what a node serves to its peers.
type Local interface {
	// Do runs an admin call on this node.
	Do(ctx context.Context, call Call) (Reply, error)
	// FollowLogs calls fn with every new log line at level or above until
	// ctx ends.
	FollowLogs(ctx context.Context, level string, fn func(line string)) error
}

// followRequest is the request of FollowLogs.
type followRequest struct {
	Level string `json:"level"`
}

// ErrNoLocal answers when the node has not finished starting.
var ErrNoLocal = errors.New("adminremote: this node's admin API is not ready")

// service is the handler type of the ServiceDesc.
type service struct{ local func() Local }

// Register adds the service to s; local returns the node's admin side
// (nil until the node's router exists).
func Register(s grpc.ServiceRegistrar, local func() Local) {
	s.RegisterService(&serviceDesc, &service{local: local})
}

type adminServer interface {
	do(ctx context.Context, call Call) (Reply, error)
	follow(ctx context.Context, level string, send func(string) error) error
}

func (s *service) do(ctx context.Context, call Call) (Reply, error) {
	l := s.local()
	if l == nil {
		return Reply{}, ErrNoLocal
	}
	return l.Do(ctx, call)
}

func (s *service) follow(ctx context.Context, level string, send func(string) error) error {
	l := s.local()
	if l == nil {
		return ErrNoLocal
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sendErr error
	err := l.FollowLogs(ctx, level, func(line string) {
		if sendErr != nil {
			return
		}
		if sendErr = send(line); sendErr != nil {
			cancel()
		}
	})
	if sendErr != nil {
		return sendErr
	}
	return err
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*adminServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Do",
		Handler: jsongrpc.Unary(methodDo, func(s adminServer, ctx context.Context, c *Call) (*Reply, error) {
			rep, err := s.do(ctx, *c)
			if err != nil {
				return nil, err
			}
			return &rep, nil
		}),
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "FollowLogs",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.BytesValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			var r followRequest
			if err := json.Unmarshal(in.GetValue(), &r); err != nil {
				return fmt.Errorf("adminremote: bad request: %w", err)
			}
			return srv.(adminServer).follow(stream.Context(), r.Level, func(line string) error {
				return stream.SendMsg(wrapperspb.String(line))
			})
		},
	}},
	Metadata: "cluster/adminremote",
}

// Do runs call on the peer behind conn.
func Do(ctx context.Context, conn grpc.ClientConnInterface, call Call) (Reply, error) {
	var rep Reply
	err := jsongrpc.Invoke(ctx, conn, methodDo, call, &rep)
	return rep, err
}

// FollowLogs streams the peer's new log lines at level or above into fn
// until ctx ends or the peer goes away.
func FollowLogs(ctx context.Context, conn grpc.ClientConnInterface, level string, fn func(line string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := conn.NewStream(ctx, &serviceDesc.Streams[0], methodFollowLogs)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(followRequest{Level: level})
	if err := st.SendMsg(wrapperspb.Bytes(b)); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		line := new(wrapperspb.StringValue)
		if err := st.RecvMsg(line); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		fn(line.GetValue())
	}
}
