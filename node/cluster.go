package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"fusion/cluster"
)

// ClusterConfig makes the node a cluster member. The node joins a cluster
// when Join, BootstrapExpect or Listen is set; with none, it runs alone
// exactly as before (no gossip, no raft).
type ClusterConfig struct {
	NodeID          string   // default: the hostname
	Join            []string // gossip seeds host:port
	Listen          string   // gossip TCP+UDP (default 0.0.0.0:7946)
	Advertise       string   // host[:port] others reach this node on
	RaftListen      string   // default: Listen's host, port+1 (0 stays 0)
	GRPCListen      string   // default: Listen's host, port+2 (0 stays 0)
	BootstrapExpect int      // form the first cluster once this many nodes are up
	Secret          string   // encrypts gossip, authenticates raft and gRPC
	Timing          cluster.Timing
}

// Enabled reports whether any cluster setting is given.
func (c ClusterConfig) Enabled() bool {
	return len(c.Join) > 0 || c.BootstrapExpect > 0 || c.Listen != ""
}

// DefaultClusterListen is the gossip address when clustering is on.
const DefaultClusterListen = "0.0.0.0:7946"

// offsetPort returns addr's host with port+delta (port 0 stays 0).
func offsetPort(addr string, delta int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("port %q: %w", port, err)
	}
	if p != 0 {
		p += delta
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// newMember builds the cluster member; httpAddr is where the API listens.
func (n *Node) newMember(httpAddr string) (*cluster.Member, error) {
	cc := n.cfg.Cluster
	if n.cfg.DataDir == "" {
		return nil, errors.New("node: a cluster member needs a data dir")
	}
	id := cc.NodeID
	if id == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("node: node id: %w", err)
		}
		id = h
	}
	listen := cc.Listen
	if listen == "" {
		listen = DefaultClusterListen
	}
	var err error
	raftListen, grpcListen := cc.RaftListen, cc.GRPCListen
	if raftListen == "" {
		if raftListen, err = offsetPort(listen, 1); err != nil {
			return nil, fmt.Errorf("node: cluster listen %q: %w", listen, err)
		}
	}
	if grpcListen == "" {
		if grpcListen, err = offsetPort(listen, 2); err != nil {
			return nil, fmt.Errorf("node: cluster listen %q: %w", listen, err)
		}
	}
	gossipAdv := cc.Advertise
	if gossipAdv != "" {
		if _, _, err := net.SplitHostPort(gossipAdv); err != nil {
			_, port, _ := net.SplitHostPort(listen)
			gossipAdv = net.JoinHostPort(gossipAdv, port)
		}
	}
	return cluster.New(cluster.Config{
		NodeID: id, DataDir: n.cfg.DataDir,
		GossipListen: listen, GossipAdvertise: gossipAdv, RaftListen: raftListen, GRPCListen: grpcListen,
		HTTPAdvertise: "http://" + advertiseHTTP(httpAddr, gossipAdv),
		Join:          cc.Join, BootstrapExpect: cc.BootstrapExpect, Secret: cc.Secret,
		Role: "server", Version: n.cfg.Version, Timing: cc.Timing, Logger: n.cfg.Logger,
	})
}

// advertiseHTTP replaces an unspecified listen host with the advertised one.
func advertiseHTTP(listen, adv string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return listen
	}
	if h, _, err := net.SplitHostPort(adv); err == nil && h != "" {
		return net.JoinHostPort(h, port)
	}
	return listen
}

// Cluster is the node's cluster member (nil when it runs alone).
func (n *Node) Cluster() *cluster.Member { return n.member }

// clusterStatus serves GET /admin/api/cluster once the member exists.
func (n *Node) clusterStatus() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.member == nil {
			http.Error(w, "cluster not started", http.StatusServiceUnavailable)
			return
		}
		n.member.AdminHandler().ServeHTTP(w, r)
	})
}

// markDraining tells the cluster to stop routing new work here.
func (n *Node) markDraining(ctx context.Context) {
	if n.member == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := n.member.SetDraining(ctx, true); err != nil {
		n.cfg.Logger.Warn("cluster: mark draining", "err", err)
	}
}

// leaveCluster marks the node draining, then leaves gracefully.
func (n *Node) leaveCluster(ctx context.Context) error {
	if n.member == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return n.member.Leave(ctx)
}
