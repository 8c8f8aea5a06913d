// Package mcpremote makes the MCP servers of every node usable from any
// node: a gRPC service that lists a node's MCP servers and tools and calls
// its tools (registered on the member's gRPC server, so it shares its
// auth and TLS), and Cluster, the router's MCP host in a cluster, which
// merges what every live node has and runs each call on a node where its
// server is ready.
//
// The service is described by hand (grpc.ServiceDesc) over protobuf's
// BytesValue carrying JSON, not generated from a .proto: tool schemas,
// arguments and results are JSON documents of MCP anyway, so a typed
// message would only wrap the same bytes.
package mcpremote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"

	"fusion/cluster/jsongrpc"
	"fusion/mcp/host"
)

// Local is a node's own MCP host (*host.Host).
type Local = host.Provider

const serviceName = "fusion.mcp.v1.Host"

const (
	methodList = "/" + serviceName + "/List"
	methodCall = "/" + serviceName + "/Call"
)

// wireTool is a host.Tool on the wire.
type wireTool struct {
	Server      string `json:"server"`
	ServerTool  string `json:"server_tool"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	InputSchema any    `json:"input_schema,omitempty"`
}

type listReply struct {
	Servers []host.ServerStatus `json:"servers"`
	Tools   []wireTool          `json:"tools"`
}

type callRequest struct {
	Name      string         `json:"name"` // always server__tool
	Arguments map[string]any `json:"arguments"`
}

type callReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Err    *wireError      `json:"error,omitempty"`
}

// wireError carries the host's typed errors across nodes.
type wireError struct {
	Kind   string `json:"kind"` // argument, not_found, not_ready, call, timeout, other
	Path   string `json:"path,omitempty"`
	Server string `json:"server,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Msg    string `json:"msg"`
}

func encodeError(err error) *wireError {
	var ae *host.ArgumentError
	var ce *host.CallError
	switch {
	case errors.As(err, &ae):
		return &wireError{Kind: "argument", Path: ae.Path, Msg: ae.Msg}
	case errors.Is(err, host.ErrToolNotFound):
		return &wireError{Kind: "not_found", Msg: err.Error()}
	case errors.Is(err, host.ErrNotReady):
		return &wireError{Kind: "not_ready", Msg: err.Error()}
	case errors.As(err, &ce) && ce.Timeout:
		return &wireError{Kind: "timeout", Server: ce.Server, Tool: ce.Tool, Msg: ce.Err.Error()}
	case errors.As(err, &ce):
		return &wireError{Kind: "call", Server: ce.Server, Tool: ce.Tool, Msg: ce.Err.Error()}
	}
	return &wireError{Kind: "other", Msg: err.Error()}
}

// decode rebuilds the typed error a peer's host returned; node names the
// peer in the messages.
func (e *wireError) decode(node string) error {
	switch e.Kind {
	case "argument":
		return &host.ArgumentError{Path: e.Path, Msg: e.Msg}
	case "not_found":
		return fmt.Errorf("%w (node %s: %s)", host.ErrToolNotFound, node, e.Msg)
	case "not_ready":
		return fmt.Errorf("%w (node %s: %s)", host.ErrNotReady, node, e.Msg)
	case "timeout", "call":
		return &host.CallError{Server: e.Server, Tool: e.Tool, Timeout: e.Kind == "timeout", Err: fmt.Errorf("on node %s: %s", node, e.Msg)}
	}
	return fmt.Errorf("node %s: %s", node, e.Msg)
}

// Service serves a node's MCP host to its peers.
type Service struct{ local Local }

// hostServer is the service's handler type for grpc.ServiceDesc.
type hostServer interface {
	list(context.Context) (*listReply, error)
	call(context.Context, *callRequest) (*callReply, error)
}

// Register adds the service to s; a nil local answers with no servers.
func Register(s grpc.ServiceRegistrar, local Local) {
	s.RegisterService(&serviceDesc, &Service{local: local})
}

func (s *Service) list(context.Context) (*listReply, error) {
	out := &listReply{Servers: []host.ServerStatus{}, Tools: []wireTool{}}
	if s.local == nil {
		return out, nil
	}
	out.Servers = s.local.Servers()
	for _, t := range s.local.Tools() {
		out.Tools = append(out.Tools, wireTool{Server: t.Server, ServerTool: t.ServerTool, Title: t.Title,
			Description: t.Description, InputSchema: t.InputSchema})
	}
	return out, nil
}

func (s *Service) call(ctx context.Context, req *callRequest) (*callReply, error) {
	if s.local == nil {
		return &callReply{Err: encodeError(fmt.Errorf("%w: %q", host.ErrToolNotFound, req.Name))}, nil
	}
	res, _, err := s.local.Call(ctx, req.Name, req.Arguments)
	if err != nil {
		return &callReply{Err: encodeError(err)}, nil
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &callReply{Result: raw}, nil
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*hostServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "List", Handler: jsongrpc.Unary(methodList, func(s hostServer, ctx context.Context, _ *struct{}) (*listReply, error) {
			return s.list(ctx)
		})},
		{MethodName: "Call", Handler: jsongrpc.Unary(methodCall, func(s hostServer, ctx context.Context, r *callRequest) (*callReply, error) {
			return s.call(ctx, r)
		})},
	},
	Metadata: "cluster/mcpremote",
}
