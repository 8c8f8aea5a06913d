package mcpremote

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	"fusion/cluster/jsongrpc"
	"fusion/mcp/host"
)

// Peer is a live node of the cluster that can be asked.
type Peer struct {
	ID   string
	Addr string // its gRPC address
}

// Cluster is the MCP host of a node in a cluster: this node's servers and
// every live peer's, merged. A server of one name on several nodes (the
// same configuration everywhere) is one server with several places to
// run; a call runs here when the server is ready here, else on the first
// peer (by id) where it is.
type Cluster struct {
	Self  string // this node's id
	Local Local  // this node's host (nil: no servers here)
	// Peers lists the live peers; Conn gives a connection to one.
	Peers func() []Peer
	Conn  func(addr string) (grpc.ClientConnInterface, error)
	// PeerTimeout bounds asking one peer for its list (default 2 s).
	PeerTimeout time.Duration
}

// DefaultPeerTimeout bounds a peer's list.
const DefaultPeerTimeout = 2 * time.Second

// nodeList is what one node has.
type nodeList struct {
	node    Peer
	servers []host.ServerStatus
	tools   []host.Tool
	err     error
}

// gather asks this node and every peer (at once, each bounded) for their
// lists, this node first, then peers by id.
func (c *Cluster) gather(ctx context.Context) []nodeList {
	var out []nodeList
	if c.Local != nil {
		out = append(out, nodeList{node: Peer{ID: c.Self}, servers: c.Local.Servers(), tools: c.Local.Tools()})
	}
	var peers []Peer
	if c.Peers != nil {
		peers = c.Peers()
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].ID < peers[j].ID })
	lists := make([]nodeList, len(peers))
	timeout := c.PeerTimeout
	if timeout <= 0 {
		timeout = DefaultPeerTimeout
	}
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i] = nodeList{node: p}
			conn, err := c.Conn(p.Addr)
			if err != nil {
				lists[i].err = err
				return
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var rep listReply
			if err := jsongrpc.Invoke(ctx, conn, methodList, struct{}{}, &rep); err != nil {
				lists[i].err = err
				return
			}
			lists[i].servers = rep.Servers
			for _, t := range rep.Tools {
				lists[i].tools = append(lists[i].tools, host.Tool{Server: t.Server, ServerTool: t.ServerTool,
					Title: t.Title, Description: t.Description, InputSchema: t.InputSchema})
			}
		}()
	}
	wg.Wait()
	return append(out, lists...)
}

// Servers lists every node's servers, each with its node. A server the
// configuration gives to other nodes (host.StateRemote) is listed by the
// nodes that run it; only when none of them answers is it listed once,
// as remote with its configured nodes and no node of its own.
func (c *Cluster) Servers() []host.ServerStatus {
	var out []host.ServerStatus
	var remote []host.ServerStatus
	running := map[string]bool{}
	for _, l := range c.gather(context.Background()) {
		for _, s := range l.servers {
			if s.State == host.StateRemote {
				remote = append(remote, s)
				continue
			}
			s.Node = l.node.ID
			running[s.Name] = true
			out = append(out, s)
		}
	}
	for _, s := range remote {
		if !running[s.Name] {
			running[s.Name] = true
			out = append(out, s)
		}
	}
	return out
}

// merged is the cluster's tools, uniquely named, and the nodes where each
// (server, tool) is ready, in the order calls try them.
func (c *Cluster) merged(ctx context.Context) ([]host.Tool, map[string][]Peer) {
	where := map[string][]Peer{}
	var all []host.Tool
	for _, l := range c.gather(ctx) {
		for _, t := range l.tools {
			key := host.QualifiedName(t.Server, t.ServerTool)
			if _, seen := where[key]; !seen {
				all = append(all, t)
			}
			where[key] = append(where[key], l.node)
		}
	}
	return host.UniqueNames(all), where
}

// Tools lists the cluster's tools under names unique across servers.
func (c *Cluster) Tools() []host.Tool {
	tools, _ := c.merged(context.Background())
	return tools
}

// Call runs the tool on a node where its server is ready: this one if it
// can, else a peer. A tool no node lists is left to this node's host,
// which says whether its server is configured here but not ready.
func (c *Cluster) Call(ctx context.Context, name string, args map[string]any) (*sdk.CallToolResult, host.Tool, error) {
	tools, where := c.merged(ctx)
	var tool host.Tool
	found := false
	for _, t := range tools {
		if t.Name == name || host.QualifiedName(t.Server, t.ServerTool) == name {
			tool, found = t, true
			break
		}
	}
	if !found {
		if c.Local != nil {
			return c.Local.Call(ctx, name, args)
		}
		return nil, host.Tool{}, fmt.Errorf("%w: %q", host.ErrToolNotFound, name)
	}
	qualified := host.QualifiedName(tool.Server, tool.ServerTool)
	node := where[qualified][0]
	if node.ID == c.Self && c.Local != nil {
		res, _, err := c.Local.Call(ctx, qualified, args)
		return res, tool, err
	}
	conn, err := c.Conn(node.Addr)
	if err != nil {
		return nil, tool, &host.CallError{Server: tool.Server, Tool: tool.ServerTool, Err: fmt.Errorf("node %s: %w", node.ID, err)}
	}
	var rep callReply
	if err := jsongrpc.Invoke(ctx, conn, methodCall, callRequest{Name: qualified, Arguments: args}, &rep); err != nil {
		if ctx.Err() != nil {
			return nil, tool, ctx.Err()
		}
		return nil, tool, &host.CallError{Server: tool.Server, Tool: tool.ServerTool, Err: fmt.Errorf("node %s: %w", node.ID, err)}
	}
	if rep.Err != nil {
		return nil, tool, rep.Err.decode(node.ID)
	}
	var res sdk.CallToolResult
	if err := json.Unmarshal(rep.Result, &res); err != nil {
		return nil, tool, &host.CallError{Server: tool.Server, Tool: tool.ServerTool, Err: fmt.Errorf("node %s: bad result: %w", node.ID, err)}
	}
	return &res, tool, nil
}
