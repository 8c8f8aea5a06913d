package mcpremote

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"fusion/mcp/host"
)

// TestErrorsCrossTheHop: each typed error of a peer's host is the same
// type on this side, so the router answers the same status as for a local
// call.
func TestErrorsCrossTheHop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"argument", &host.ArgumentError{Path: "arguments.b", Msg: "required field is missing"}, func(err error) bool {
			var ae *host.ArgumentError
			return errors.As(err, &ae) && ae.Path == "arguments.b" && ae.Msg == "required field is missing"
		}},
		{"not found", host.ErrToolNotFound, func(err error) bool { return errors.Is(err, host.ErrToolNotFound) }},
		{"not ready", host.ErrNotReady, func(err error) bool { return errors.Is(err, host.ErrNotReady) }},
		{"timeout", &host.CallError{Server: "s", Tool: "t", Timeout: true, Err: errors.New("deadline")}, func(err error) bool {
			var ce *host.CallError
			return errors.As(err, &ce) && ce.Timeout && ce.Server == "s" && ce.Tool == "t"
		}},
		{"transport", &host.CallError{Server: "s", Tool: "t", Err: errors.New("EOF")}, func(err error) bool {
			var ce *host.CallError
			return errors.As(err, &ce) && !ce.Timeout && ce.Server == "s"
		}},
		{"other", errors.New("boom"), func(err error) bool { return err.Error() == "node p: boom" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := encodeError(tc.err).decode("p"); !tc.check(got) {
				t.Errorf("%v came back as %#v", tc.err, got)
			}
		})
	}
}

// staticHost is a Local with fixed lists; Call answers with a fixed
// result. The real host is tested in mcp/host and end to end in node.
type staticHost struct {
	servers []host.ServerStatus
	tools   []host.Tool
}

func (s staticHost) Servers() []host.ServerStatus { return s.servers }
func (s staticHost) Tools() []host.Tool           { return s.tools }
func (s staticHost) Call(_ context.Context, name string, args map[string]any) (*sdk.CallToolResult, host.Tool, error) {
	known := false
	for _, t := range s.tools {
		known = known || host.QualifiedName(t.Server, t.ServerTool) == name
	}
	if !known {
		return nil, host.Tool{}, host.ErrToolNotFound
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + " " + args["x"].(string)}}}, host.Tool{}, nil
}

// TestClusterMergesAndBoundsPeers: two real peers on gRPC and one that
// accepts connections but never answers; the lists merge (a server on two
// nodes is one, named once), calls go to the node that has the tool, and
// the silent peer costs at most PeerTimeout.
func TestClusterMergesAndBoundsPeers(t *testing.T) {
	serve := func(local Local) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		Register(s, local)
		go func() { _ = s.Serve(lis) }()
		t.Cleanup(s.Stop)
		return lis.Addr().String()
	}
	ready := func(name string) host.ServerStatus {
		return host.ServerStatus{Name: name, State: host.StateReady, Transport: host.TransportStdio, ToolCount: 1}
	}
	p1 := serve(staticHost{servers: []host.ServerStatus{ready("git")}, tools: []host.Tool{{Server: "git", ServerTool: "search"}}})
	p2 := serve(staticHost{servers: []host.ServerStatus{ready("docs")}, tools: []host.Tool{{Server: "docs", ServerTool: "search"}, {Server: "docs", ServerTool: "fetch"}}})
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	c := &Cluster{
		Self:  "self",
		Local: staticHost{servers: []host.ServerStatus{ready("git")}, tools: []host.Tool{{Server: "git", ServerTool: "search"}}},
		Peers: func() []Peer {
			return []Peer{{ID: "p2", Addr: p2}, {ID: "p1", Addr: p1}, {ID: "p3", Addr: silent.Addr().String()}}
		},
		Conn: func(addr string) (grpc.ClientConnInterface, error) {
			mu.Lock()
			defer mu.Unlock()
			if cc := conns[addr]; cc != nil {
				return cc, nil
			}
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			conns[addr] = cc
			return cc, err
		},
		PeerTimeout: 300 * time.Millisecond,
	}
	t.Cleanup(func() {
		for _, cc := range conns {
			cc.Close()
		}
	})
	var nodes []string
	for _, s := range c.Servers() {
		nodes = append(nodes, s.Node+"/"+s.Name)
	}
	if strings.Join(nodes, " ") != "self/git p1/git p2/docs" {
		t.Errorf("servers %v", nodes)
	}
	var names []string
	for _, tl := range c.Tools() {
		names = append(names, tl.Name)
	}
	if strings.Join(names, " ") != "docs__search fetch git__search" {
		t.Errorf("tools %v", names)
	}
	for name, want := range map[string]string{"fetch": "docs__fetch 1", "git__search": "git__search 1", "docs__search": "docs__search 1"} {
		res, tool, err := c.Call(context.Background(), name, map[string]any{"x": "1"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := res.Content[0].(*sdk.TextContent).Text; got != want || tool.Name != name {
			t.Errorf("%s: %q (tool %+v), want %q", name, got, tool, want)
		}
	}
	if _, _, err := c.Call(context.Background(), "nothing", nil); !errors.Is(err, host.ErrToolNotFound) {
		t.Errorf("unknown: %v", err)
	}
}
