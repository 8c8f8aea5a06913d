// Package cluster holds membership, consensus, the gRPC services between
// nodes, placement planning and the routing table.
package cluster
